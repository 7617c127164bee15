# Runs fuzz_gguf for $ENV{FUZZ_SECONDS} (default 60) seconds on a fresh,
# writable copy of the seed corpus (plus the small reference GGUFs where
# present). Fails when the fuzzer finds a crash, leak, timeout or OOM; the
# reproducer lands in ARTIFACTS.
# Invoked as: cmake -DFUZZER=... -DSEEDS=... -DCORPUS=... -DARTIFACTS=... -DREF_DIR=... -P run_fuzz.cmake
if(DEFINED ENV{FUZZ_SECONDS} AND NOT "$ENV{FUZZ_SECONDS}" STREQUAL "")
  set(seconds "$ENV{FUZZ_SECONDS}")
else()
  set(seconds 60)
endif()

file(REMOVE_RECURSE "${CORPUS}")
file(MAKE_DIRECTORY "${CORPUS}" "${ARTIFACTS}")
file(GLOB seeds "${SEEDS}/*.gguf")
if(IS_DIRECTORY "${REF_DIR}/models")
  # The reference models are larger than -max_len; the fuzzer keeps their
  # first 64 KiB, which covers the header and the start of real metadata.
  file(GLOB refs "${REF_DIR}/models/aidreams260K-Q4_K_M.gguf" "${REF_DIR}/vocab/ggml-vocab-llama-spm.gguf")
  list(APPEND seeds ${refs})
endif()
if(NOT seeds)
  message(FATAL_ERROR "no seed files in ${SEEDS}")
endif()
file(COPY ${seeds} DESTINATION "${CORPUS}")

message(STATUS "fuzzing for ${seconds} s")
execute_process(
  COMMAND "${FUZZER}" "${CORPUS}" -max_total_time=${seconds} -rss_limit_mb=2048 -max_len=65536
          -timeout=10 -print_final_stats=1 "-artifact_prefix=${ARTIFACTS}/"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "fuzz_gguf found a failure (exit ${rc}); reproducer in ${ARTIFACTS}")
endif()
