// `sustain run -m M -p PROMPT`: generate text, streamed to stdout; prompt and
// generation speed on stderr.
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "base/batch_invariant.h"
#include "cli/commands.h"
#include "cli/file_io.h"
#include "cli/media_input.h"
#include "cli/model_session.h"
#include "cli/ranks.h"
#include "cli/serving_flags.h"
#include "cli/spec_flags.h"
#include "engine/api.h"
#include "grammar/constraint.h"
#include "grammar/gbnf.h"
#include "grammar/schema.h"
#include "sampling/sampler.h"

namespace sustain::cli {
namespace {

struct RunArgs {
  ModelArgs m;
  int64_t n_predict = 128;
  sampling::SamplerConfig sc;
  bool ignore_eos = false;
  bool batch_invariant = false;
  SpecArgs spec;  // with --spec, generation runs in the engine (one sequence)
  MediaArgs media;  // --mmproj / --image
  SplitArgs split;  // --split layer over mpirun ranks
  // Structured output (docs/structured_output.md): at most one of these.
  std::string grammar, grammar_file, json_schema, json_schema_file;
};

// The grammar the flags ask for, or null for none.
Expected<std::shared_ptr<const grammar::Grammar>> constraint_grammar(const RunArgs& a) {
  const int given = !a.grammar.empty() + !a.grammar_file.empty() + !a.json_schema.empty() +
                    !a.json_schema_file.empty();
  if (given == 0) return std::shared_ptr<const grammar::Grammar>();
  if (given > 1)
    return Status(Code::kInvalidArgument,
                  "--grammar, --grammar-file, --json-schema and --json-schema-file exclude each "
                  "other");
  std::string text = !a.grammar.empty() ? a.grammar : a.json_schema;
  if (!a.grammar_file.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(text, read_text_file(a.grammar_file, "grammar"));
  }
  if (!a.json_schema_file.empty()) {
    SUSTAIN_ASSIGN_OR_RETURN(text, read_text_file(a.json_schema_file, "JSON schema"));
  }
  Expected<grammar::Grammar> g = Status(Code::kInternal, "unset");
  if (!a.grammar.empty() || !a.grammar_file.empty()) {
    g = grammar::parse_gbnf(text);
  } else {
    auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_discarded())
      return Status(Code::kInvalidArgument, "--json-schema: the schema is not valid JSON");
    g = grammar::compile_json_schema(j);
  }
  if (!g) return g.status();
  return std::make_shared<const grammar::Grammar>(std::move(*g));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// --spec: the engine runs the one sequence, drafting and verifying; the
// text is streamed as it is verified, the counts go to the stderr line.
int run_engine(const RunArgs& a, const spec::Config& sc, std::vector<int32_t> ids, int64_t n_gen,
               const tokenizer::Tokenizer& tok,
               std::shared_ptr<const engine::MediaPrompt> media) {
  engine::EngineConfig ec;
  ec.model_path = a.m.model;
  ec.n_threads = a.m.threads;
  ec.n_ctx = a.m.ctx;
  ec.n_parallel = 1;
  ec.batch_tokens = a.m.batch;
  ec.ubatch_tokens = a.m.ubatch;
  ec.prefix_cache = false;
  ec.batch_invariant = a.batch_invariant;
  ec.repack = a.m.repack;
  ec.spec = sc;
  auto kt = kv_type(a.m.cache_type_k, "--cache-type-k");
  if (!kt) return fail(kt.status().message());
  auto vt = kv_type(a.m.cache_type_v, "--cache-type-v");
  if (!vt) return fail(vt.status().message());
  ec.k_type = *kt;
  ec.v_type = *vt;
  auto budget = kv_budget_bytes(a.m);
  if (!budget) return fail(budget.status().message());
  ec.kv_budget_bytes = *budget;
  auto e = engine::Engine::create(ec);
  if (!e) return fail(e.status().message());
  engine::Request r;
  r.prompt = std::move(ids);
  r.media = std::move(media);
  r.max_tokens = static_cast<int32_t>(std::min<int64_t>(n_gen, INT32_MAX));
  r.sampling = a.sc;
  r.ignore_eos = a.ignore_eos;
  const size_t n_prompt = r.prompt.size();
  if (sc.uses("oracle")) {
    // The oracle drafts what an earlier greedy pass produced: make that
    // pass first (its output is not printed, its time not counted).
    if (r.media) return fail("run: --spec oracle does not take images (it records text prompts)");
    engine::Request first = r;
    first.sampling.temperature = 0.0f;
    auto fs = (*e)->submit(std::move(first));
    if (!fs) return fail(fs.status().message());
    while (true) {
      auto ev = fs->next();
      if (!ev || !ev->done) continue;
      if (ev->finish == engine::Finish::kError) return fail(ev->error.message());
      std::fprintf(stderr, "sustain: oracle: first (greedy) pass made %lld tokens\n",
                   static_cast<long long>(ev->usage.completion_tokens));
      break;
    }
  }
  auto st = (*e)->submit(std::move(r));
  if (!st) return fail(st.status().message());
  tokenizer::StreamDecoder dec(tok);
  engine::Event last;
  while (true) {
    auto ev = st->next();
    if (!ev) continue;
    for (const auto& t : ev->tokens) {
      const std::string text = dec.push(t.id);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
    if (ev->done) {
      last = std::move(*ev);
      break;
    }
  }
  const std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  if (last.finish == engine::Finish::kError) return fail(last.error.message());
  const auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const double t_prompt = secs(last.t_first_token - last.t_start);
  const int64_t gen = last.usage.completion_tokens;
  const double t_gen = secs(last.t_end - last.t_first_token);
  const auto& u = last.usage;
  // The first token comes with the prompt; speed counts the tokens after it.
  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s (%.2f tok/s) | generation: %lld tokens in %.3f s "
               "(%.2f tok/s) | spec %s: %lld drafted, %lld accepted (%.0f%%), %lld verify steps "
               "| threads %d, ctx %lld\n",
               n_prompt, t_prompt, n_prompt / std::max(t_prompt, 1e-9),
               static_cast<long long>(gen), t_gen,
               gen > 1 ? (gen - 1) / std::max(t_gen, 1e-9) : 0.0, a.spec.spec.c_str(),
               static_cast<long long>(u.spec_drafted), static_cast<long long>(u.spec_accepted),
               u.spec_drafted ? 100.0 * u.spec_accepted / u.spec_drafted : 0.0,
               static_cast<long long>(u.spec_steps),
               a.m.threads > 0 ? a.m.threads : ThreadPool::hardware_threads(),
               static_cast<long long>(a.m.ctx));
  return 0;
}

int run_main(RunArgs a, Ranks& ranks) {
  set_batch_invariant(a.batch_invariant);  // before any workspace is made
  Status valid = sampling::validate(a.sc);
  if (!valid) return fail(valid.message());
  auto g = constraint_grammar(a);
  if (!g) return fail(g.status().message());
  auto spec = spec_config(a.spec);
  if (!spec) return fail("run: " + spec.status().message());
  if (ranks.split() && (spec->enabled() || a.media.given()))
    return fail(fmt::format(
        "--split {} with --spec or --image is not built yet (give one or the other)",
        ranks.tensor ? "tensor" : "layer"));
  auto s = open_session(a.m, !spec->enabled(), &ranks);
  if (!s) return fail(s.status().message());
  Session& sess = **s;
  if (ranks.follower()) {
    Status st = follow_steps(sess);
    return st ? 0 : fail(fmt::format("rank {}: {}", ranks.rank(), st.message()));
  }
  if (*g) {
    auto c = std::make_shared<grammar::GrammarConstraint>(
        *g, grammar::TokenVocab::from_tokenizer(*sess.tok));
    if (Status st = c->check_startable(); !st) return fail(st.message());
    a.sc.constraint = std::move(c);
  }
  // The prompt must leave room for at least one generated token.
  MediaStats ms;
  auto in = prompt_input(sess, a.m, a.media, 1, &ms);
  if (!in) return fail(in.status().message());
  std::vector<int32_t>* ids = &in->ids;
  const std::optional<engine::MediaPrompt>& mp = in->media;
  const int64_t room = sess.ctx - static_cast<int64_t>(ids->size());
  int64_t n_gen = a.n_predict < 0 ? room : std::min(a.n_predict, room);
  if (a.n_predict > room)
    std::fprintf(stderr, "sustain: note: generating %lld tokens, the room left in -c %lld\n",
                 static_cast<long long>(n_gen), static_cast<long long>(sess.ctx));

  if (spec->enabled())
    return run_engine(a, *spec, std::move(*ids), n_gen, *sess.tok,
                      mp ? std::make_shared<const engine::MediaPrompt>(*mp) : nullptr);

  sampling::Sampler sampler(a.sc);
  for (int64_t i = 0; i < static_cast<int64_t>(ids->size()); ++i)
    if (!mp || !mp->image_at(i)) sampler.accept((*ids)[static_cast<size_t>(i)]);
  kv::PageTable table;
  std::vector<float> logits;
  const dist::Traffic c0 = ranks.comm->traffic();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = feed_prompt(sess, table, *in, a.m.batch, nullptr, &logits);
  if (!st) return fail(st.message());
  const double t_prompt = seconds_since(t0);
  const dist::Traffic c1 = ranks.comm->traffic();

  tokenizer::StreamDecoder dec(*sess.tok);
  const int32_t n_vocab = static_cast<int32_t>(sess.model->config().n_vocab);
  const auto t1 = std::chrono::steady_clock::now();
  int64_t generated = 0;
  std::vector<int32_t> next(1);
  for (; generated < n_gen; ++generated) {
    const int32_t tok = sampler.sample(logits.data(), n_vocab);
    if (!a.ignore_eos && sess.tok->is_eog(tok)) break;
    const std::string text = dec.push(tok);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (generated + 1 == n_gen) {
      ++generated;
      break;
    }
    next[0] = tok;
    st = feed(sess, table, next, 1, nullptr, &logits);
    if (!st) return fail(st.message());
  }
  const std::string rest = dec.flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  const double t_gen = seconds_since(t1);
  std::fprintf(stderr,
               "prompt: %zu tokens in %.3f s (%.2f tok/s) | generation: %lld tokens in %.3f s "
               "(%.2f tok/s) | threads %d, ctx %lld\n",
               ids->size(), t_prompt, ids->size() / std::max(t_prompt, 1e-9),
               static_cast<long long>(generated), t_gen, generated / std::max(t_gen, 1e-9),
               sess.pool->size(), static_cast<long long>(sess.ctx));
  if (ranks.size() > 1) {
    // Rank 0's transport calls: bytes it exchanged and the time inside them
    // (waiting for the other ranks included), per phase.
    const dist::Traffic& c2 = ranks.comm->traffic();
    const double gen_steps = static_cast<double>(std::max<int64_t>(generated - 1, 1));
    std::fprintf(stderr,
                 "split %s over %d ranks, rank 0 communication | prompt: %.2f MiB, %.1f ms "
                 "(%.1f %%) | generation: %.1f KiB/token, %.2f ms/token (%.1f %%), %llu calls\n",
                 ranks.tensor ? "tensor" : "layer", ranks.size(),
                 static_cast<double>(c1.bytes - c0.bytes) / (1 << 20),
                 (c1.seconds - c0.seconds) * 1e3,
                 100.0 * (c1.seconds - c0.seconds) / std::max(t_prompt, 1e-9),
                 static_cast<double>(c2.bytes - c1.bytes) / 1024.0 / gen_steps,
                 (c2.seconds - c1.seconds) * 1e3 / gen_steps,
                 100.0 * (c2.seconds - c1.seconds) / std::max(t_gen, 1e-9),
                 static_cast<unsigned long long>(c2.calls - c1.calls));
  }
  if (mp) {
    double enc = 0;
    for (double v : ms.encode_ms) enc += v;
    std::fprintf(stderr, "images: %zu, %lld image tokens of the prompt, encoded in %.1f ms\n",
                 mp->images.size(), static_cast<long long>(mp->embd.size() / mp->n_embd), enc);
  }
  return 0;
}

int run_run(const RunArgs& a) {
  auto r = open_ranks(a.split, a.m.model);
  if (!r) return fail_launch(r.status());
  return finish_ranks(**r, run_main(a, **r));
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* sub = app.add_subcommand("run", "Generate text from a prompt, streamed to stdout");
  add_model_flags(sub, a->m, true, true);
  sub->add_option("-n,--n-predict", a->n_predict,
                  "tokens to generate (-1: until the context is full)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 24));
  sub->add_option("--temp", a->sc.temperature, "temperature (0 = greedy)")->capture_default_str();
  sub->add_option("--top-k", a->sc.top_k, "top-k (0 = off)")->capture_default_str();
  sub->add_option("--top-p", a->sc.top_p, "top-p (1 = off)")->capture_default_str();
  sub->add_option("--min-p", a->sc.min_p, "min-p (0 = off)")->capture_default_str();
  sub->add_option("--repeat-penalty", a->sc.repeat_penalty, "repetition penalty (1 = off)")
      ->capture_default_str();
  sub->add_option("--presence-penalty", a->sc.presence_penalty, "presence penalty")
      ->capture_default_str();
  sub->add_option("--frequency-penalty", a->sc.frequency_penalty, "frequency penalty")
      ->capture_default_str();
  sub->add_option("-s,--seed", a->sc.seed, "sampling seed")->capture_default_str();
  sub->add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
  sub->add_flag("--batch-invariant", a->batch_invariant, kBatchInvariantHelp);
  add_spec_flags(sub, a->spec);
  add_media_flags(sub, a->media);
  add_split_flags(sub, a->split);
  sub->add_option("--grammar", a->grammar, "constrain the output to this GBNF grammar");
  sub->add_option("--grammar-file", a->grammar_file, "... read from a file");
  sub->add_option("-j,--json-schema", a->json_schema, "constrain the output to this JSON schema");
  sub->add_option("--json-schema-file", a->json_schema_file, "... read from a file");
  return [a] { return run_run(*a); };
}

}  // namespace sustain::cli
