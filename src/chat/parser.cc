// Parser for the chat-template subset of Jinja2: tokens (lexer.h) to the
// syntax tree of jinja.h.
//
// Whitespace (applied by the lexer) follows the environment Hugging Face transformers (and so the
// published templates) render with: trim_blocks (the first newline after a
// block or comment tag is dropped), lstrip_blocks (spaces and tabs before a
// block or comment tag on its own line are dropped), `-` strips all
// whitespace on that side of a tag, `+` turns the trimming off, line endings
// become "\n" and one trailing newline of the template is dropped
// (keep_trailing_newline=False). The operator precedence is Jinja2's:
// filters and tests bind tighter than arithmetic, arithmetic tighter than
// comparisons, then not / and / or / `x if c else y`.
#include <algorithm>
#include <cstring>
#include <string>

#include "chat/jinja.h"
#include "chat/lexer.h"

namespace sustain::chat::jinja {
namespace {

class Parser {
 public:
  Parser(const Lexer& lex, std::vector<Token> toks, const ChatTemplateLimits& limits)
      : lex_(lex), toks_(std::move(toks)), limits_(limits) {}

  Expected<Body> parse_all() {
    std::string stop;
    return parse_body({}, "", 0, stop);
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(i_ + ahead, toks_.size() - 1)];
  }
  const Token& next() {
    const Token& t = toks_[std::min(i_, toks_.size() - 1)];
    if (i_ < toks_.size() - 1) ++i_;
    return t;
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.type == Tok::kOp && t.text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    const Token& t = peek(ahead);
    return t.type == Tok::kName && t.text == name;
  }
  Status fail(const Token& t, const std::string& what) const {
    return error(Code::kInvalidArgument, "{}: {}", lex_.where(t.pos), what);
  }
  std::string describe(const Token& t) const {
    if (t.type == Tok::kName || t.type == Tok::kOp) return fmt::format("'{}'", t.text);
    return tok_name(t.type);
  }
  Status expect_op(const char* op) {
    if (!is_op(op))
      return fail(peek(), fmt::format("expected '{}', found {}", op, describe(peek())));
    next();
    return Status::ok();
  }
  Status expect_block_end(const char* tag) {
    if (peek().type != Tok::kBlockEnd)
      return fail(peek(),
                  fmt::format("expected '%}}' to close '{}', found {}", tag, describe(peek())));
    next();
    return Status::ok();
  }
  Expected<std::string> expect_name(const char* what) {
    if (peek().type != Tok::kName)
      return fail(peek(), fmt::format("expected {}, found {}", what, describe(peek())));
    return next().text;
  }

  NodePtr node(NodeType type, const Token& at) {
    auto n = std::make_unique<Node>();
    n->type = type;
    auto [line, col] = lex_.line_col(at.pos);
    n->line = line;
    n->col = col;
    return n;
  }

  // Every expression node passes through here: the tree depth bounds the
  // evaluator's recursion and the destructor's.
  Expected<NodePtr> seal(NodePtr n) {
    int d = 0;
    for (auto& k : n->kids)
      if (k) d = std::max(d, k->depth);
    for (auto& kw : n->kwargs) d = std::max(d, kw.second->depth);
    n->depth = d + 1;
    if (n->depth > limits_.max_depth)
      return error(Code::kInvalidArgument,
                   "line {}, column {}: expression nested deeper than the limit of {}", n->line,
                   n->col, limits_.max_depth);
    return n;
  }

  // Parses statements until one of `stops` ({% endfor %} ...) or the end.
  Expected<Body> parse_body(std::initializer_list<const char*> stops, const char* opener,
                            size_t opener_pos, std::string& stop_found) {
    if (++block_depth_ > limits_.max_depth)
      return error(Code::kInvalidArgument, "{}: blocks nested deeper than the limit of {}",
                   lex_.where(opener_pos), limits_.max_depth);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Tok::kEof) {
        if (stops.size() != 0)
          return error(Code::kInvalidArgument, "{}: unclosed '{{% {} %}}' (expected '{{% {} %}}')",
                       lex_.where(opener_pos), opener, *stops.begin());
        break;
      }
      if (t.type == Tok::kText) {
        auto n = node(NodeType::kText, t);
        n->name = next().text;
        body.push_back(std::move(n));
      } else if (t.type == Tok::kVarBegin) {
        auto n = node(NodeType::kOutput, next());
        SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_expression());
        n->kids.push_back(std::move(e));
        if (peek().type != Tok::kVarEnd)
          return fail(peek(), fmt::format("expected '}}}}', found {}", describe(peek())));
        next();
        body.push_back(std::move(n));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& kw = peek(1);
        if (kw.type != Tok::kName) return fail(kw, "expected a tag name after '{%'");
        for (const char* s : stops)
          if (kw.text == s) {
            next();
            next();
            stop_found = s;
            --block_depth_;
            return body;
          }
        SUSTAIN_ASSIGN_OR_RETURN(auto st, parse_statement());
        if (st) body.push_back(std::move(st));
      } else {
        return fail(t, fmt::format("unexpected {}", describe(t)));
      }
    }
    --block_depth_;
    return body;
  }

  Expected<NodePtr> parse_statement() {
    const Token& begin = next();
    const Token& kw = next();
    const std::string k = kw.text;
    if (k == "if") return parse_if(begin);
    if (k == "for") return parse_for(begin);
    if (k == "set") return parse_set(begin);
    if (k == "macro") return parse_macro(begin);
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) return fail(kw, fmt::format("'{}' outside a for loop", k));
      auto n = node(k == "break" ? NodeType::kBreak : NodeType::kContinue, begin);
      SUSTAIN_TRY(expect_block_end(k.c_str()));
      return n;
    }
    if (k == "generation") {
      auto n = node(NodeType::kScope, begin);
      SUSTAIN_TRY(expect_block_end("generation"));
      std::string stop;
      SUSTAIN_ASSIGN_OR_RETURN(auto b,
                               parse_body({"endgeneration"}, "generation", begin.pos, stop));
      SUSTAIN_TRY(expect_block_end("endgeneration"));
      n->bodies.push_back(std::move(b));
      return n;
    }
    static const char* kEnds[] = {"endif", "endfor", "endmacro", "endset",
                                  "else",  "elif",   "endraw",   "endgeneration"};
    for (const char* e : kEnds)
      if (k == e) return fail(kw, fmt::format("unexpected '{{% {} %}}' with no open block", k));
    return fail(kw, fmt::format("unsupported tag '{}'", k));
  }

  Expected<NodePtr> parse_if(const Token& begin) {
    auto n = node(NodeType::kIf, begin);
    std::string stop = "elif";
    while (stop == "elif") {
      SUSTAIN_ASSIGN_OR_RETURN(auto cond, parse_expression());
      SUSTAIN_TRY(expect_block_end("if"));
      n->kids.push_back(std::move(cond));
      SUSTAIN_ASSIGN_OR_RETURN(auto b,
                               parse_body({"endif", "elif", "else"}, "if", begin.pos, stop));
      n->bodies.push_back(std::move(b));
    }
    if (stop == "else") {
      SUSTAIN_TRY(expect_block_end("else"));
      SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endif"}, "if", begin.pos, stop));
      n->bodies.push_back(std::move(b));
    }
    SUSTAIN_TRY(expect_block_end("endif"));
    return n;
  }

  Expected<NodePtr> parse_for(const Token& begin) {
    auto n = node(NodeType::kFor, begin);
    do {
      SUSTAIN_ASSIGN_OR_RETURN(auto name, expect_name("a loop variable"));
      n->names.push_back(name);
    } while (is_op(",") && next().type == Tok::kOp);
    if (!is_name("in"))
      return fail(peek(), fmt::format("expected 'in', found {}", describe(peek())));
    next();
    SUSTAIN_ASSIGN_OR_RETURN(auto iter, parse_expression(false));
    n->kids.push_back(std::move(iter));
    NodePtr filter;
    if (is_name("if")) {
      next();
      SUSTAIN_ASSIGN_OR_RETURN(filter, parse_expression());
    }
    n->kids.push_back(std::move(filter));
    if (is_name("recursive")) return fail(peek(), "recursive for loops are not supported");
    SUSTAIN_TRY(expect_block_end("for"));
    ++loop_depth_;
    std::string stop;
    const int refs_before = loop_refs_;
    SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endfor", "else"}, "for", begin.pos, stop));
    n->flag = loop_refs_ != refs_before;  // the body reads `loop` (or a nested loop's)
    --loop_depth_;
    n->bodies.push_back(std::move(b));
    if (stop == "else") {
      SUSTAIN_TRY(expect_block_end("else"));
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_body({"endfor"}, "for", begin.pos, stop));
      n->bodies.push_back(std::move(e));
    }
    SUSTAIN_TRY(expect_block_end("endfor"));
    return n;
  }

  Expected<NodePtr> parse_set(const Token& begin) {
    auto n = node(NodeType::kSet, begin);
    SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a variable name"));
    if (is_op(".")) {
      next();
      SUSTAIN_ASSIGN_OR_RETURN(n->name2, expect_name("an attribute name"));
    } else if (is_op(",")) {
      n->names.push_back(n->name);
      while (is_op(",")) {
        next();
        SUSTAIN_ASSIGN_OR_RETURN(auto name, expect_name("a variable name"));
        n->names.push_back(name);
      }
    }
    if (!is_op("=")) {
      if (!n->name2.empty() || !n->names.empty() || peek().type != Tok::kBlockEnd)
        return fail(peek(), fmt::format("expected '=' in 'set', found {}", describe(peek())));
      next();
      n->type = NodeType::kSetBlock;
      std::string stop;
      SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endset"}, "set", begin.pos, stop));
      SUSTAIN_TRY(expect_block_end("endset"));
      n->bodies.push_back(std::move(b));
      return n;
    }
    next();
    SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_tuple_or_expression());
    n->kids.push_back(std::move(v));
    SUSTAIN_TRY(expect_block_end("set"));
    return n;
  }

  Expected<NodePtr> parse_macro(const Token& begin) {
    auto n = node(NodeType::kMacro, begin);
    SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a macro name"));
    SUSTAIN_TRY(expect_op("("));
    while (!is_op(")")) {
      SUSTAIN_ASSIGN_OR_RETURN(auto p, expect_name("a parameter name"));
      n->names.push_back(p);
      NodePtr def;
      if (is_op("=")) {
        next();
        SUSTAIN_ASSIGN_OR_RETURN(def, parse_expression());
      }
      n->kids.push_back(std::move(def));
      if (!is_op(",")) break;
      next();
    }
    SUSTAIN_TRY(expect_op(")"));
    SUSTAIN_TRY(expect_block_end("macro"));
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    std::string stop;
    SUSTAIN_ASSIGN_OR_RETURN(auto b, parse_body({"endmacro"}, "macro", begin.pos, stop));
    loop_depth_ = saved_loops;
    if (peek().type == Tok::kName && peek().text == n->name) next();
    SUSTAIN_TRY(expect_block_end("endmacro"));
    n->bodies.push_back(std::move(b));
    return n;
  }

  // `a, b` (a tuple, here a list) where Jinja allows one: `set x = a, b`.
  Expected<NodePtr> parse_tuple_or_expression() {
    const Token& at = peek();
    SUSTAIN_ASSIGN_OR_RETURN(auto first, parse_expression());
    if (!is_op(",")) return first;
    auto n = node(NodeType::kListLit, at);
    n->flag = true;
    n->kids.push_back(std::move(first));
    while (is_op(",")) {
      next();
      if (peek().type == Tok::kBlockEnd) break;
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_expression());
      n->kids.push_back(std::move(e));
    }
    return seal(std::move(n));
  }

  struct DepthGuard {
    int& d;
    explicit DepthGuard(int& depth) : d(depth) { ++d; }
    ~DepthGuard() { --d; }
  };

  Expected<NodePtr> parse_expression(bool with_condexpr = true) {
    DepthGuard g(expr_depth_);
    if (expr_depth_ > limits_.max_depth)
      return fail(peek(),
                  fmt::format("expression nested deeper than the limit of {}", limits_.max_depth));
    if (!with_condexpr) return parse_or();
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_or());
    while (is_name("if")) {
      auto n = node(NodeType::kCondExpr, next());
      SUSTAIN_ASSIGN_OR_RETURN(auto cond, parse_or());
      NodePtr other;
      if (is_name("else")) {
        next();
        SUSTAIN_ASSIGN_OR_RETURN(other, parse_expression());
      }
      n->kids.push_back(std::move(e));
      n->kids.push_back(std::move(cond));
      n->kids.push_back(std::move(other));
      SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
    }
    return e;
  }

  Expected<NodePtr> binary(NodePtr a, const Token& op, NodePtr b) {
    auto n = node(NodeType::kBinary, op);
    n->name = op.text;
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return seal(std::move(n));
  }

  Expected<NodePtr> parse_or() {
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_and());
    while (is_name("or")) {
      const Token& op = next();
      SUSTAIN_ASSIGN_OR_RETURN(auto r, parse_and());
      SUSTAIN_ASSIGN_OR_RETURN(e, binary(std::move(e), op, std::move(r)));
    }
    return e;
  }
  Expected<NodePtr> parse_and() {
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_not());
    while (is_name("and")) {
      const Token& op = next();
      SUSTAIN_ASSIGN_OR_RETURN(auto r, parse_not());
      SUSTAIN_ASSIGN_OR_RETURN(e, binary(std::move(e), op, std::move(r)));
    }
    return e;
  }
  Expected<NodePtr> parse_not() {
    if (is_name("not")) {
      DepthGuard g(expr_depth_);
      if (expr_depth_ > limits_.max_depth)
        return fail(peek(), fmt::format("expression nested deeper than the limit of {}",
                                        limits_.max_depth));
      auto n = node(NodeType::kUnary, next());
      n->name = "not";
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_not());
      n->kids.push_back(std::move(e));
      return seal(std::move(n));
    }
    return parse_compare();
  }
  Expected<NodePtr> parse_compare() {
    const Token& at = peek();
    SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_math1());
    NodePtr cmp;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.type == Tok::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                 t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(NodeType::kCompare, at);
        cmp->kids.push_back(std::move(e));
      }
      SUSTAIN_ASSIGN_OR_RETURN(auto r, parse_math1());
      cmp->kids.push_back(std::move(r));
      cmp->names.push_back(op);
    }
    if (cmp) return seal(std::move(cmp));
    return e;
  }
  template <typename F>
  Expected<NodePtr> left_assoc(F sub, std::initializer_list<const char*> ops) {
    SUSTAIN_ASSIGN_OR_RETURN(auto e, sub());
    while (true) {
      bool found = false;
      for (const char* op : ops)
        if (is_op(op)) found = true;
      if (!found) return e;
      const Token& op = next();
      SUSTAIN_ASSIGN_OR_RETURN(auto r, sub());
      SUSTAIN_ASSIGN_OR_RETURN(e, binary(std::move(e), op, std::move(r)));
    }
  }
  Expected<NodePtr> parse_math1() {
    return left_assoc([this] { return parse_concat(); }, {"+", "-"});
  }
  Expected<NodePtr> parse_concat() {
    return left_assoc([this] { return parse_math2(); }, {"~"});
  }
  Expected<NodePtr> parse_math2() {
    return left_assoc([this] { return parse_pow(); }, {"*", "/", "//", "%"});
  }
  Expected<NodePtr> parse_pow() {
    return left_assoc([this] { return parse_unary(true); }, {"**"});
  }

  Expected<NodePtr> parse_unary(bool with_filter) {
    NodePtr e;
    if (is_op("-") || is_op("+")) {
      DepthGuard g(expr_depth_);
      if (expr_depth_ > limits_.max_depth)
        return fail(peek(), fmt::format("expression nested deeper than the limit of {}",
                                        limits_.max_depth));
      auto n = node(NodeType::kUnary, peek());
      n->name = next().text;
      SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_unary(false));
      n->kids.push_back(std::move(k));
      SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
    } else {
      SUSTAIN_ASSIGN_OR_RETURN(e, parse_primary());
    }
    SUSTAIN_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) return parse_filter_expr(std::move(e));
    return e;
  }

  Expected<NodePtr> parse_primary() {
    const Token& t = peek();
    if (t.type == Tok::kName) {
      next();
      auto n = node(NodeType::kLiteral, t);
      if (t.text == "true" || t.text == "True") {
        n->value = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        n->value = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        n->value = Value::none();
      } else {
        n->type = NodeType::kName;
        n->name = t.text;
        if (t.text == "loop") ++loop_refs_;
      }
      return seal(std::move(n));
    }
    if (t.type == Tok::kString) {
      auto n = node(NodeType::kLiteral, t);
      std::string s = next().text;
      while (peek().type == Tok::kString) s += next().text;  // adjacent literals concatenate
      n->value = Value::string(std::move(s));
      return seal(std::move(n));
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      auto n = node(NodeType::kLiteral, t);
      n->value = t.type == Tok::kInt ? Value::integer(t.ival) : Value::number(t.fval);
      next();
      return seal(std::move(n));
    }
    if (is_op("(")) {
      next();
      if (is_op(")")) {
        auto n = node(NodeType::kListLit, t);
        n->flag = true;
        next();
        return seal(std::move(n));
      }
      SUSTAIN_ASSIGN_OR_RETURN(auto e, parse_expression());
      if (is_op(",")) {
        auto n = node(NodeType::kListLit, t);
        n->flag = true;
        n->kids.push_back(std::move(e));
        while (is_op(",")) {
          next();
          if (is_op(")")) break;
          SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_expression());
          n->kids.push_back(std::move(k));
        }
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      }
      SUSTAIN_TRY(expect_op(")"));
      return e;
    }
    if (is_op("[")) {
      auto n = node(NodeType::kListLit, next());
      while (!is_op("]")) {
        SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_expression());
        n->kids.push_back(std::move(k));
        if (!is_op(",")) break;
        next();
      }
      SUSTAIN_TRY(expect_op("]"));
      return seal(std::move(n));
    }
    if (is_op("{")) {
      auto n = node(NodeType::kDictLit, next());
      while (!is_op("}")) {
        SUSTAIN_ASSIGN_OR_RETURN(auto k, parse_expression());
        SUSTAIN_TRY(expect_op(":"));
        SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_expression());
        n->kids.push_back(std::move(k));
        n->kids.push_back(std::move(v));
        if (!is_op(",")) break;
        next();
      }
      SUSTAIN_TRY(expect_op("}"));
      return seal(std::move(n));
    }
    return fail(t, fmt::format("expected an expression, found {}", describe(t)));
  }

  Expected<NodePtr> parse_postfix(NodePtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& dot = next();
        if (peek().type == Tok::kInt) {
          auto n = node(NodeType::kGetItem, dot);
          auto idx = node(NodeType::kLiteral, peek());
          idx->value = Value::integer(next().ival);
          SUSTAIN_ASSIGN_OR_RETURN(idx, seal(std::move(idx)));
          n->kids.push_back(std::move(e));
          n->kids.push_back(std::move(idx));
          SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
          continue;
        }
        auto n = node(NodeType::kGetAttr, dot);
        SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("an attribute name after '.'"));
        n->kids.push_back(std::move(e));
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      } else if (is_op("[")) {
        SUSTAIN_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e)));
      } else if (is_op("(")) {
        SUSTAIN_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Expected<NodePtr> parse_subscript(NodePtr e) {
    const Token& open = next();
    NodePtr parts[3];
    int part = 0;
    bool slice = false;
    while (true) {
      if (is_op(":")) {
        next();
        slice = true;
        if (++part > 2) return fail(peek(), "a slice has at most three parts");
        continue;
      }
      if (is_op("]")) break;
      if (parts[part]) return fail(peek(), fmt::format("expected ']', found {}", describe(peek())));
      SUSTAIN_ASSIGN_OR_RETURN(parts[part], parse_expression());
    }
    next();
    auto n = node(slice ? NodeType::kSlice : NodeType::kGetItem, open);
    n->kids.push_back(std::move(e));
    if (!slice) {
      if (!parts[0]) return fail(open, "empty subscript '[]'");
      n->kids.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) n->kids.push_back(std::move(p));
    }
    return seal(std::move(n));
  }

  // Arguments `(a, b, k=v)` appended to n->kids / n->kwargs.
  Status parse_args(Node& n) {
    SUSTAIN_TRY(expect_op("("));
    while (!is_op(")")) {
      if (is_op("*") || is_op("**"))
        return fail(peek(), "'*' and '**' arguments are not supported");
      if (peek().type == Tok::kName && is_op("=", 1)) {
        std::string k = next().text;
        next();
        SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_expression());
        n.kwargs.emplace_back(k, std::move(v));
      } else {
        if (!n.kwargs.empty()) return fail(peek(), "positional argument after keyword argument");
        SUSTAIN_ASSIGN_OR_RETURN(auto v, parse_expression());
        n.kids.push_back(std::move(v));
      }
      if (!is_op(",")) break;
      next();
    }
    return expect_op(")");
  }

  Expected<NodePtr> parse_call(NodePtr e) {
    auto n = node(NodeType::kCall, peek());
    n->line = e->line;  // errors (raise_exception's too) point at the callee
    n->col = e->col;
    n->kids.push_back(std::move(e));
    SUSTAIN_TRY(parse_args(*n));
    return seal(std::move(n));
  }

  Expected<NodePtr> parse_filter_expr(NodePtr e) {
    while (true) {
      if (is_op("|")) {
        auto n = node(NodeType::kFilter, next());
        SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a filter name after '|'"));
        n->kids.push_back(std::move(e));
        if (is_op("(")) SUSTAIN_TRY(parse_args(*n));
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      } else if (is_name("is")) {
        auto n = node(NodeType::kTest, next());
        if (is_name("not")) {
          next();
          n->flag = true;
        }
        SUSTAIN_ASSIGN_OR_RETURN(n->name, expect_name("a test name after 'is'"));
        n->kids.push_back(std::move(e));
        const Token& t = peek();
        if (is_op("(")) {
          SUSTAIN_TRY(parse_args(*n));
        } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt ||
                    t.type == Tok::kFloat || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("is") &&
                   !is_name("if") && !is_name("in") && !is_name("not")) {
          SUSTAIN_ASSIGN_OR_RETURN(auto arg, parse_primary());
          SUSTAIN_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
          n->kids.push_back(std::move(arg));
        }
        SUSTAIN_ASSIGN_OR_RETURN(e, seal(std::move(n)));
      } else if (is_op("(")) {
        SUSTAIN_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  const Lexer& lex_;
  std::vector<Token> toks_;
  size_t i_ = 0;
  ChatTemplateLimits limits_;
  int block_depth_ = 0;
  int expr_depth_ = 0;
  int loop_depth_ = 0;
  int loop_refs_ = 0;
};

}  // namespace

Expected<Template> parse_template(std::string_view source, const ChatTemplateLimits& limits) {
  // Newlines normalized to "\n", and one trailing newline dropped, as Jinja does.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lex(src);
  std::vector<Token> toks;
  SUSTAIN_TRY(lex.run(toks));
  Parser p(lex, std::move(toks), limits);
  SUSTAIN_ASSIGN_OR_RETURN(auto body, p.parse_all());
  Template t;
  t.body = std::move(body);
  t.limits = limits;
  return t;
}

}  // namespace sustain::chat::jinja
