// Private to the chat module: the value model (Python/Jinja2 semantics), the
// syntax tree, and the parser and evaluator entry points. lexer.cc and
// parser.cc turn source into a Template; renderer.h and the render*.cc files
// render it; template.cc holds the public API and render_chat.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/template.h"

namespace sustain::chat::jinja {

// Deepest list/dict nesting a value may have (JSON context or built by the
// template): printing, comparing and freeing values recurse over it.
inline constexpr int kMaxValueDepth = 256;

struct Value;
struct Node;
using List = std::vector<Value>;

// Insertion-ordered string-keyed map, as Python dicts iterate.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, size_t> index;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kNamespace,  // namespace(): a dict whose attributes `set ns.x` may assign
  kCallable,   // builtin function, bound method, or macro
};

struct Callable {
  enum Type : uint8_t { kBuiltin, kMethod, kMacro } type = kBuiltin;
  std::string name;
  std::shared_ptr<const Value> self;  // bound methods: the receiver
  const Node* macro = nullptr;        // macros: the {% macro %} node
};

// A Python value. Strings and containers are shared, so copies are O(1);
// lists and dicts are never mutated after construction (the sandbox that
// Hugging Face renders with forbids it), namespaces are.
struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  int depth = 0;                         // container nesting (1 for a flat list)
  bool tuple = false;                    // a list that prints as a Python tuple
  std::shared_ptr<const std::string> s;  // string; for undefined, a hint for messages
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // dict or namespace
  std::shared_ptr<const Callable> fn;

  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List items);  // callers check depth against kMaxValueDepth
  static Value make_tuple(List items);
  static Value make_dict(Dict d, Kind kind = Kind::kDict);
  static Value callable(Callable c);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_string() const { return kind == Kind::kString; }
  const std::string& str() const { return *s; }
};

// Statements and expressions share one node type: a small tagged tree is
// easier to bound and to walk than a class hierarchy.
enum class NodeType : uint8_t {
  // statements
  kText,
  kOutput,
  kIf,        // kids: conditions; bodies: one per condition, plus else
  kFor,       // names: targets; kids[0] iter, kids[1] filter (may be null); bodies: body, else;
              // flag: the body mentions `loop`
  kSet,       // name (and name2 for ns.attr) or names (tuple); kids[0] value
  kSetBlock,  // name; bodies[0]
  kMacro,     // name; names: params; kids: defaults (null when none); bodies[0]
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %})
  // expressions
  kLiteral,
  kName,
  kGetAttr,   // kids[0].name
  kGetItem,   // kids[0][kids[1]]
  kSlice,     // kids[0][kids[1]:kids[2]:kids[3]], null parts omitted
  kCall,      // kids[0](kids[1..], kwargs)
  kFilter,    // name; kids[0] input, kids[1..] args, kwargs
  kTest,      // name; flag = negated; kids[0] input, kids[1..] args
  kUnary,     // name "-", "+" or "not"
  kBinary,    // name: + - * / // % ** ~ and or
  kCompare,   // kids: operands; names: operators (== != < <= > >= in notin)
  kCondExpr,  // kids: then, cond, else (may be null)
  kListLit,   // flag: a tuple
  kDictLit,   // kids: key, value, key, value...
};

using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  NodeType type;
  int line = 0, col = 0;
  int depth = 1;  // expression tree depth, bounded by the parser
  std::string name, name2;
  Value value;
  bool flag = false;
  std::vector<NodePtr> kids;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  std::vector<std::string> names;
  std::vector<Body> bodies;
};

struct Template {
  Body body;
  ChatTemplateLimits limits;
};

Expected<Template> parse_template(std::string_view source, const ChatTemplateLimits& limits);

// Globals from a JSON object (the context); key order as the JSON iterates.
Expected<Value> from_json(const nlohmann::json& j);
Expected<Value> from_json(const nlohmann::ordered_json& j);

Expected<std::string> render_template(const Template& t, const Value& context);

// Python's str() and repr() of a value (str of undefined is "").
void append_str(const Value& v, std::string& out);
void append_repr(const Value& v, std::string& out);
std::string to_str(const Value& v);
std::string float_repr(double f);
std::string string_repr(const std::string& s);
const char* type_name(const Value& v);

// json.dumps options, as the `tojson` filter Hugging Face installs passes them.
struct JsonStyle {
  bool pretty = false;  // indent given: one item per line
  std::string indent;
  std::string item_sep = ", ", key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
Status dump_json(const Value& v, const JsonStyle& style, int level, std::string& out);

// Strings are indexed, sliced and counted in code points, as Python does.
// Bytes that are not valid UTF-8 become U+DC80..U+DCFF and are written back
// as the same bytes (Python's surrogateescape), so nothing is lost.
namespace text {
uint32_t decode_one(std::string_view s, size_t i, size_t& len);
std::vector<uint32_t> to_cps(std::string_view s);
std::string from_cps(const uint32_t* begin, const uint32_t* end);
size_t count_cps(std::string_view s);
bool is_space(uint32_t cp);  // Python's str.isspace
// Simple case mapping for Latin-1, Latin Extended-A, Greek and Cyrillic
// (Python maps every script; these cover the common European ones).
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
bool is_cased_letter(uint32_t cp);
std::string upper(std::string_view s);  // 'ß' -> "SS" as Python does
std::string lower(std::string_view s);
}  // namespace text

}  // namespace sustain::chat::jinja
