# Runs one libFuzzer target for $ENV{FUZZ_SECONDS} seconds (default SECONDS)
# on a fresh, writable corpus copied from the seed files (SEEDS: a list of
# files or globs; those that do not exist are skipped). Fails when the
# fuzzer finds a crash, leak, timeout or OOM; the reproducer lands in
# ARTIFACTS and becomes a regression test.
# Invoked as: cmake -DFUZZER=... -DNAME=... -DSEEDS=a;b -DCORPUS=... -DARTIFACTS=...
#             -DMAX_LEN=... -DSECONDS=... -P run_fuzz_target.cmake
if(DEFINED ENV{FUZZ_SECONDS} AND NOT "$ENV{FUZZ_SECONDS}" STREQUAL "")
  set(seconds "$ENV{FUZZ_SECONDS}")
else()
  set(seconds ${SECONDS})
endif()

file(REMOVE_RECURSE "${CORPUS}")
file(MAKE_DIRECTORY "${CORPUS}" "${ARTIFACTS}")
set(files)
foreach(pattern IN LISTS SEEDS)
  file(GLOB found "${pattern}")
  list(APPEND files ${found})
endforeach()
if(NOT files)
  message(FATAL_ERROR "${NAME}: no seed files in ${SEEDS}")
endif()
file(COPY ${files} DESTINATION "${CORPUS}")

message(STATUS "${NAME}: fuzzing for ${seconds} s")
execute_process(
  COMMAND "${FUZZER}" "${CORPUS}" -max_total_time=${seconds} -rss_limit_mb=2048
          -max_len=${MAX_LEN} -timeout=10 -print_final_stats=1 "-artifact_prefix=${ARTIFACTS}/"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NAME} found a failure (exit ${rc}); reproducer in ${ARTIFACTS}")
endif()
