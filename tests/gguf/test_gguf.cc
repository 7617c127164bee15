// GGUF writer -> reader round trips, and reading the llama.cpp-made reference files.
// The malformed-input suite is in test_gguf_malformed.cc.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "test_util.h"

namespace sustain::gguf {
namespace {

// True when a temporary file of the writer (`<path>.tmp.<pid>.<n>`) is left
// beside `path`.
bool tmp_left(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string prefix = p.filename().string() + ".tmp";
  for (const auto& e : std::filesystem::directory_iterator(p.parent_path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) return true;
  return false;
}

using test::ref_path;
using test::tmp_path;

std::vector<uint8_t> pattern_bytes(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return v;
}

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Every scalar type at its extremes, strings (empty, UTF-8, embedded NUL),
// typed arrays of every element type, and nested arrays.
void set_all_values(Writer& w) {
  w.set("u8", Value::u8(255));
  w.set("i8", Value::i8(-128));
  w.set("u16", Value::u16(65535));
  w.set("i16", Value::i16(-32768));
  w.set("u32", Value::u32(4294967295u));
  w.set("i32", Value::i32(-2147483647 - 1));
  w.set("u64", Value::u64(~0ull));
  w.set("i64", Value::i64(std::numeric_limits<int64_t>::min()));
  w.set("f32", Value::f32(-1.5e-7f));
  w.set("f64", Value::f64(3.141592653589793));
  w.set("bool_t", Value::boolean(true));
  w.set("bool_f", Value::boolean(false));
  w.set("str", Value::str("h\xc3\xa9llo"));
  w.set("str_empty", Value::str(""));
  w.set("str_nul", Value::str(std::string("a\0b", 3)));
  w.set("arr_str", Value::str_array({"a", "", "ccc"}));
  w.set("arr_f32", Value::f32_array({1.0f, -2.5f, 1e30f}));
  w.set("arr_i32", Value::i32_array({-1, 0, 7}));
  w.set("arr_u8", Value::array(ValueType::kUint8, {Value::u8(1), Value::u8(200)}));
  w.set("arr_i8", Value::array(ValueType::kInt8, {Value::i8(-5)}));
  w.set("arr_u16", Value::array(ValueType::kUint16, {Value::u16(600)}));
  w.set("arr_i16", Value::array(ValueType::kInt16, {Value::i16(-600)}));
  w.set("arr_u32", Value::array(ValueType::kUint32, {Value::u32(70000)}));
  w.set("arr_u64", Value::array(ValueType::kUint64, {Value::u64(1ull << 40)}));
  w.set("arr_i64", Value::array(ValueType::kInt64, {Value::i64(-(1ll << 40))}));
  w.set("arr_f64", Value::array(ValueType::kFloat64, {Value::f64(0.1)}));
  w.set("arr_bool", Value::array(ValueType::kBool, {Value::boolean(true), Value::boolean(false)}));
  w.set("arr_empty", Value::array(ValueType::kFloat32, {}));
  w.set("arr_nested", Value::array(ValueType::kArray,
                                   {Value::i32_array({1, 2}), Value::str_array({"x"}),
                                    Value::array(ValueType::kArray, {Value::i32_array({3})})}));
}

// Structural equality that also compares the exact types.
void expect_same(const Value& a, const Value& b, const std::string& where) {
  ASSERT_EQ(a.type, b.type) << where;
  if (a.type == ValueType::kArray) {
    const auto& x = std::get<Array>(a.v);
    const auto& y = std::get<Array>(b.v);
    ASSERT_EQ(x.elem_type, y.elem_type) << where;
    ASSERT_EQ(x.items.size(), y.items.size()) << where;
    for (size_t i = 0; i < x.items.size(); ++i)
      expect_same(x.items[i], y.items[i], where + "[" + std::to_string(i) + "]");
    return;
  }
  if (a.type == ValueType::kFloat32) {
    EXPECT_EQ(static_cast<float>(std::get<double>(a.v)), std::get<double>(b.v)) << where;
    return;
  }
  ASSERT_EQ(a.v.index(), b.v.index()) << where;
  if (const auto* s = std::get_if<std::string>(&a.v))
    EXPECT_EQ(*s, std::get<std::string>(b.v)) << where;
  else if (const auto* u = std::get_if<uint64_t>(&a.v))
    EXPECT_EQ(*u, std::get<uint64_t>(b.v)) << where;
  else if (const auto* i = std::get_if<int64_t>(&a.v))
    EXPECT_EQ(*i, std::get<int64_t>(b.v)) << where;
  else if (const auto* d = std::get_if<double>(&a.v))
    EXPECT_EQ(*d, std::get<double>(b.v)) << where;
  else
    EXPECT_EQ(std::get<bool>(a.v), std::get<bool>(b.v)) << where;
}

TEST(GgufRoundTrip, EveryValueType) {
  Writer w;
  set_all_values(w);
  std::string path = tmp_path("values.gguf");
  ASSERT_TRUE(w.write(path)) << "write failed";
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_TRUE(f->tensors().empty());

  // Metadata comes back in insertion order.
  ASSERT_EQ(f->metadata().size(), 29u);
  EXPECT_EQ(f->metadata()[0].first, "u8");
  EXPECT_EQ(f->metadata()[28].first, "arr_nested");

  EXPECT_EQ(*f->get_uint("u8"), 255u);
  EXPECT_EQ(*f->get_int("i8"), -128);
  EXPECT_EQ(*f->get_uint("u16"), 65535u);
  EXPECT_EQ(*f->get_int("i16"), -32768);
  EXPECT_EQ(*f->get_uint("u32"), 4294967295u);
  EXPECT_EQ(*f->get_int("i32"), -2147483648ll);
  EXPECT_EQ(*f->get_uint("u64"), ~0ull);
  EXPECT_EQ(*f->get_int("i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->get_float("f32"), static_cast<double>(-1.5e-7f));
  EXPECT_EQ(*f->get_float("f64"), 3.141592653589793);
  EXPECT_EQ(*f->get_float("u32"), 4294967295.0);  // integers widen to float
  EXPECT_TRUE(*f->get_bool("bool_t"));
  EXPECT_FALSE(*f->get_bool("bool_f"));
  EXPECT_EQ(*f->get_string("str"), "h\xc3\xa9llo");
  EXPECT_EQ(*f->get_string("str_empty"), "");
  EXPECT_EQ(*f->get_string("str_nul"), std::string("a\0b", 3));
  EXPECT_EQ(*f->get_string_array("arr_str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*f->get_float_array("arr_f32"), (std::vector<float>{1.0f, -2.5f, 1e30f}));
  EXPECT_EQ(*f->get_int_array("arr_i32"), (std::vector<int64_t>{-1, 0, 7}));
  EXPECT_EQ(*f->get_int_array("arr_u8"), (std::vector<int64_t>{1, 200}));
  EXPECT_EQ(*f->get_int_array("arr_u64"), (std::vector<int64_t>{1ll << 40}));
  EXPECT_EQ(*f->get_int_array("arr_i64"), (std::vector<int64_t>{-(1ll << 40)}));
  EXPECT_EQ(*f->get_float_array("arr_f64"), (std::vector<float>{0.1f}));
  EXPECT_TRUE(f->get_float_array("arr_empty")->empty());

  // Exact types and nested structure survive.
  const Value* nested = f->find("arr_nested");
  ASSERT_NE(nested, nullptr);
  Value want =
      Value::array(ValueType::kArray, {Value::i32_array({1, 2}), Value::str_array({"x"}),
                                       Value::array(ValueType::kArray, {Value::i32_array({3})})});
  expect_same(*nested, want, "arr_nested");
  expect_same(*f->find("arr_bool"),
              Value::array(ValueType::kBool, {Value::boolean(true), Value::boolean(false)}),
              "arr_bool");
  expect_same(*f->find("arr_u16"), Value::array(ValueType::kUint16, {Value::u16(600)}), "arr_u16");
  expect_same(*f->find("arr_i16"), Value::array(ValueType::kInt16, {Value::i16(-600)}), "arr_i16");
  expect_same(*f->find("arr_u32"), Value::array(ValueType::kUint32, {Value::u32(70000)}),
              "arr_u32");
  expect_same(*f->find("arr_i8"), Value::array(ValueType::kInt8, {Value::i8(-5)}), "arr_i8");
  expect_same(*f->find("f32"), Value::f32(-1.5e-7f), "f32");

  // A second write of the file's own metadata is byte-identical (exact types preserved).
  Writer w2;
  for (const auto& [k, v] : f->metadata()) w2.set(k, v);
  std::string path2 = tmp_path("values2.gguf");
  ASSERT_TRUE(w2.write(path2));
  EXPECT_EQ(read_all(path), read_all(path2));
}

TEST(GgufRoundTrip, SetReplacesKeepingPositionAndRemove) {
  Writer w;
  w.set_str("a", "1");
  w.set_u32("b", 2);
  w.set_f32("c", 3.0f);
  w.set_str("a", "replaced");
  w.remove("b");
  w.set_bool("d", true);
  std::string path = tmp_path("replace.gguf");
  ASSERT_TRUE(w.write(path));
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  ASSERT_EQ(f->metadata().size(), 3u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(*f->get_string("a"), "replaced");
  EXPECT_EQ(f->metadata()[1].first, "c");
  EXPECT_EQ(f->metadata()[2].first, "d");
  EXPECT_FALSE(f->has("b"));
}

// One tensor of every type sustain can put in a GGUF file, with known bytes.
struct TensorCase {
  std::string name;
  QType type;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<TensorCase> every_type_tensors() {
  std::vector<TensorCase> out;
  uint32_t seed = 1;
  for (const auto& tr : all_qtypes()) {
    if (!tr.in_gguf) continue;
    // Shapes of 1, 2, 3 and 4 dims in turn; rows of two blocks.
    std::vector<int64_t> shape;
    size_t n_dims = 1 + seed % 4;
    for (size_t d = 0; d + 1 < n_dims; ++d) shape.push_back(static_cast<int64_t>(d + 2));
    shape.push_back(2 * tr.block_elems);
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d);
    uint64_t n_bytes = n / tr.block_elems * tr.block_bytes;
    out.push_back({"t." + std::string(tr.name), tr.type, shape, pattern_bytes(n_bytes, seed++)});
  }
  return out;
}

void check_tensors(const File& f, const std::vector<TensorCase>& cases) {
  ASSERT_EQ(f.tensors().size(), cases.size());
  uint64_t data_size = f.file_size() - f.data_offset();
  for (size_t i = 0; i < cases.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    const TensorCase& c = cases[i];
    EXPECT_EQ(t.name, c.name);
    EXPECT_EQ(t.type, c.type) << c.name;
    EXPECT_EQ(t.shape, c.shape) << c.name;
    std::vector<uint64_t> ne(c.shape.rbegin(), c.shape.rend());
    EXPECT_EQ(t.ne, ne) << c.name;
    EXPECT_EQ(t.n_bytes, c.bytes.size()) << c.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << c.name;
    EXPECT_LE(t.offset + t.n_bytes, data_size) << c.name;
    ASSERT_EQ(t.data, f.mapping()->data() + f.data_offset() + t.offset);
    EXPECT_TRUE(std::equal(c.bytes.begin(), c.bytes.end(), t.data)) << c.name;
    EXPECT_EQ(f.find_tensor(c.name), &t);
  }
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  EXPECT_EQ(f.find_tensor("no.such.tensor"), nullptr);
}

TEST(GgufRoundTrip, EveryTensorTypeWithData) {
  auto cases = every_type_tensors();
  ASSERT_GT(cases.size(), 25u);
  Writer w;
  w.set_str("general.architecture", "test");
  for (const auto& c : cases) ASSERT_TRUE(w.add_tensor(c.name, c.type, c.shape, c.bytes.data()));
  ASSERT_EQ(w.tensor_count(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(w.tensor_bytes(i), cases[i].bytes.size());
  std::string path = tmp_path("tensors.gguf");
  ASSERT_TRUE(w.write(path));
  EXPECT_FALSE(tmp_left(path));
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  check_tensors(*f, cases);
  EXPECT_EQ(*f->get_string("general.architecture"), "test");
}

TEST(GgufRoundTrip, StreamingMatchesWholeWrite) {
  auto cases = every_type_tensors();
  Writer whole, streamed;
  for (Writer* w : {&whole, &streamed}) {
    w->set_u32("x", 7);
    for (const auto& c : cases)
      ASSERT_TRUE(w->add_tensor(c.name, c.type, c.shape, w == &whole ? c.bytes.data() : nullptr));
  }
  std::string p1 = tmp_path("whole.gguf"), p2 = tmp_path("streamed.gguf");
  std::filesystem::remove(p2);
  ASSERT_TRUE(whole.write(p1));
  ASSERT_TRUE(streamed.begin(p2));
  EXPECT_FALSE(std::filesystem::exists(p2)) << "final name must not exist before finish()";
  for (const auto& c : cases)
    ASSERT_TRUE(streamed.write_tensor_data(c.bytes.data(), c.bytes.size()));
  ASSERT_TRUE(streamed.finish());
  EXPECT_EQ(read_all(p1), read_all(p2));
  auto f = File::open(p2);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  check_tensors(*f, cases);
}

TEST(GgufRoundTrip, Alignment64) {
  auto cases = every_type_tensors();
  Writer w;
  ASSERT_TRUE(w.set_alignment(64));
  for (const auto& c : cases) ASSERT_TRUE(w.add_tensor(c.name, c.type, c.shape, c.bytes.data()));
  std::string path = tmp_path("align64.gguf");
  ASSERT_TRUE(w.write(path));
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->get_uint("general.alignment"), 64u);
  EXPECT_EQ(f->find("general.alignment")->type, ValueType::kUint32);
  check_tensors(*f, cases);
}

TEST(GgufRoundTrip, GeneralAlignmentKeyIsRespected) {
  Writer w;
  w.set_u32("general.alignment", 128);
  auto data = pattern_bytes(4 * 3, 9);
  ASSERT_TRUE(w.add_tensor("a", QType::F32, {3}, data.data()));
  ASSERT_TRUE(w.add_tensor("b", QType::F32, {3}, data.data()));
  std::string path = tmp_path("align128.gguf");
  ASSERT_TRUE(w.write(path));
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->alignment(), 128u);
  EXPECT_EQ(f->tensors()[1].offset, 128u);
}

TEST(GgufRoundTrip, DefaultAlignmentWritesNoKey) {
  Writer w;
  ASSERT_TRUE(w.set_alignment(64));
  ASSERT_TRUE(w.set_alignment(32));
  std::string path = tmp_path("align32.gguf");
  ASSERT_TRUE(w.write(path));
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_FALSE(f->has("general.alignment"));
  EXPECT_EQ(f->alignment(), 32u);
}

TEST(GgufRoundTrip, ParseFromMemory) {
  Writer w;
  w.set_str("k", "v");
  auto data = pattern_bytes(2 * 34, 3);
  ASSERT_TRUE(w.add_tensor("q", QType::Q8_0, {2, 32}, data.data()));
  std::string path = tmp_path("mem.gguf");
  ASSERT_TRUE(w.write(path));
  auto bytes = read_all(path);
  auto f = File::parse(MappedFile::from_memory(bytes.data(), bytes.size(), "mem.gguf"));
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->path(), "mem.gguf");
  EXPECT_EQ(f->file_size(), bytes.size());
  EXPECT_EQ(f->tensors()[0].n_elements, 64u);
  EXPECT_TRUE(std::equal(data.begin(), data.end(), f->tensors()[0].data));
}

// ---- writer argument validation ----

TEST(GgufWriter, RejectsBadTensors) {
  Writer w;
  std::vector<uint8_t> buf(1 << 12);
  auto expect_invalid = [&](Status st, const char* words) {
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  };
  expect_invalid(w.add_tensor("a", QType::F32, {}, buf.data()), "0 dims");
  expect_invalid(w.add_tensor("a", QType::F32, {1, 1, 1, 1, 1}, buf.data()), "5 dims");
  expect_invalid(w.add_tensor("a", QType::F32, {2, 0}, buf.data()), "not positive");
  expect_invalid(w.add_tensor("a", QType::F32, {-1}, buf.data()), "not positive");
  expect_invalid(w.add_tensor("a", QType::Q4_0, {2, 33}, buf.data()), "multiple of the Q4_0");
  expect_invalid(w.add_tensor("a", QType::FP8_E4M3, {4}, buf.data()), "cannot be stored");
  expect_invalid(w.add_tensor("a", QType::F32, {1ll << 40, 1ll << 40}, buf.data()), "overflow");
  expect_invalid(w.add_tensor("", QType::F32, {4}, buf.data()), "empty tensor name");
  ASSERT_TRUE(w.add_tensor("a", QType::F32, {4}, buf.data()));
  expect_invalid(w.add_tensor("a", QType::F32, {4}, buf.data()), "already added");
  EXPECT_EQ(w.tensor_count(), 1u);
  expect_invalid(w.set_alignment(0), "power of two");
  expect_invalid(w.set_alignment(48), "power of two");
  expect_invalid(w.set_alignment(1u << 31), "power of two");
}

TEST(GgufWriter, StreamingChecksSizesAndCompleteness) {
  std::vector<uint8_t> buf(64);
  std::string path = tmp_path("stream_bad.gguf");
  std::filesystem::remove(path);
  {
    Writer w;
    ASSERT_TRUE(w.add_tensor("a", QType::F32, {4}));
    ASSERT_TRUE(w.add_tensor("b", QType::F32, {8}));
    Status st = w.write(path);
    EXPECT_NE(st.message().find("has no data"), std::string::npos) << st.message();
    EXPECT_EQ(w.write_tensor_data(buf.data(), 16).code(), Code::kInvalidArgument);  // no begin
    ASSERT_TRUE(w.begin(path));
    st = w.write_tensor_data(buf.data(), 15);
    EXPECT_NE(st.message().find("got 15 bytes of data, expected 16"), std::string::npos)
        << st.message();
    ASSERT_TRUE(w.write_tensor_data(buf.data(), 16));
    st = w.finish();
    EXPECT_NE(st.message().find("only 1 of 2 tensors"), std::string::npos) << st.message();
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_FALSE(tmp_left(path));
  }
  {
    Writer w;
    ASSERT_TRUE(w.add_tensor("a", QType::F32, {4}));
    ASSERT_TRUE(w.begin(path));
    ASSERT_TRUE(w.write_tensor_data(buf.data(), 16));
    Status st = w.write_tensor_data(buf.data(), 16);
    EXPECT_NE(st.message().find("more often"), std::string::npos) << st.message();
    ASSERT_TRUE(w.finish());
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  {
    // An abandoned stream leaves nothing behind.
    std::string p2 = tmp_path("stream_abandoned.gguf");
    std::filesystem::remove(p2);
    {
      Writer w;
      ASSERT_TRUE(w.add_tensor("a", QType::F32, {4}));
      ASSERT_TRUE(w.begin(p2));
    }
    EXPECT_FALSE(std::filesystem::exists(p2));
    EXPECT_FALSE(tmp_left(p2));
  }
}

TEST(GgufWriter, PaddedSizeSumOverflow) {
  // Each tensor's size fits in 64 bits; their padded sum does not.
  Writer w;
  const int64_t rows = (int64_t{1} << 55) - 1;
  ASSERT_TRUE(w.add_tensor("a", QType::Q8_K, {rows, 256}));
  ASSERT_TRUE(w.add_tensor("b", QType::Q8_K, {rows, 256}));
  Status st = w.begin(tmp_path("overflow.gguf"));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("data section size overflows at `b`"), std::string::npos)
      << st.message();
}

TEST(GgufWriter, ReportsIoErrorWithPath) {
  Writer w;
  Status st = w.write("/nonexistent-dir/x.gguf");
  EXPECT_EQ(st.code(), Code::kIo);
  EXPECT_NE(st.message().find("/nonexistent-dir/x.gguf"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("No such file"), std::string::npos) << st.message();
}

TEST(GgufWriter, RejectsInconsistentValues) {
  Writer w;
  w.set("bad", Value{ValueType::kUint8, uint64_t{300}});
  Status st = w.write(tmp_path("badvalue.gguf"));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("`bad`"), std::string::npos) << st.message();

  Writer wf;
  wf.set("huge_f32", Value{ValueType::kFloat32, 1e300});
  st = wf.write(tmp_path("badvalue.gguf"));
  EXPECT_NE(st.message().find("`huge_f32`"), std::string::npos) << st.message();

  Writer w2;
  w2.set("mixed", Value::array(ValueType::kInt32, {Value::i32(1), Value::str("x")}));
  st = w2.write(tmp_path("badvalue.gguf"));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("`mixed`"), std::string::npos) << st.message();

  // Nesting: 8 levels of arrays are written (and read back), 9 are refused.
  auto nest = [](int levels) {
    Value v = Value::i32_array({1});
    for (int i = 1; i < levels; ++i) v = Value::array(ValueType::kArray, {v});
    return v;
  };
  Writer deep;
  deep.set("n", nest(8));
  ASSERT_TRUE(deep.write(tmp_path("deep.gguf")));
  auto f = File::open(tmp_path("deep.gguf"));
  ASSERT_TRUE(f.has_value()) << f.status().message();
  expect_same(*f->find("n"), nest(8), "n");
  deep.set("n", nest(9));
  st = deep.write(tmp_path("deep.gguf"));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("deeper than 8"), std::string::npos) << st.message();

  Writer w3;
  w3.set("general.alignment", Value::u32(48));
  st = w3.write(tmp_path("badvalue.gguf"));
  EXPECT_NE(st.message().find("power of two"), std::string::npos) << st.message();
}

// ---- typed accessor errors ----

TEST(GgufAccessors, ErrorsNameKeyAndTypes) {
  Writer w;
  w.set_str("llama.block_count", "three");
  w.set("neg", Value::i32(-3));
  w.set("big", Value::u64(~0ull));
  w.set("ints", Value::i32_array({1, 2}));
  w.set("strs", Value::str_array({"a"}));
  w.set("flag", Value::boolean(true));
  w.set("wide", Value::array(ValueType::kFloat64, {Value::f64(1.0), Value::f64(1e300)}));
  w.set("narrow", Value::array(ValueType::kFloat64, {Value::f64(0.5)}));
  std::string path = tmp_path("accessors.gguf");
  ASSERT_TRUE(w.write(path));
  auto f = File::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();

  auto msg = [](const Status& st) { return st.message(); };
  auto u = f->get_uint("llama.block_count");
  ASSERT_FALSE(u.has_value());
  EXPECT_EQ(u.status().code(), Code::kBadFile);
  EXPECT_NE(msg(u.status()).find("`llama.block_count` is a string, expected an unsigned integer"),
            std::string::npos)
      << msg(u.status());
  auto missing = f->get_uint("nope");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(msg(missing.status()).find("key `nope` not found"), std::string::npos);

  EXPECT_NE(msg(f->get_uint("neg").status()).find("`neg` is -3"), std::string::npos);
  EXPECT_EQ(*f->get_int("neg"), -3);
  EXPECT_NE(msg(f->get_int("big").status()).find("int64"), std::string::npos);
  EXPECT_NE(msg(f->get_string_array("ints").status())
                .find("`ints` is an array of int32, expected an array of strings"),
            std::string::npos)
      << msg(f->get_string_array("ints").status());
  EXPECT_NE(msg(f->get_int_array("strs").status()).find("`strs` is an array of string"),
            std::string::npos);
  EXPECT_NE(msg(f->get_float_array("flag").status()).find("`flag` is a bool"), std::string::npos);
  EXPECT_NE(msg(f->get_bool("ints").status()).find("`ints` is an array of int32, expected a bool"),
            std::string::npos);
  EXPECT_NE(msg(f->get_string("neg").status()).find("`neg` is an int32, expected a string"),
            std::string::npos);
  EXPECT_NE(msg(f->get_float("strs").status()).find("expected a number"), std::string::npos);
  EXPECT_NE(
      msg(f->get_float_array("wide").status()).find("`wide[1]` is 1e+300, out of the float32"),
      std::string::npos)
      << msg(f->get_float_array("wide").status());
  EXPECT_EQ(f->get_float_array("narrow")->at(0), 0.5f);

  // _or variants: default only where absent.
  EXPECT_EQ(*f->get_uint_or("absent", 5), 5u);
  EXPECT_EQ(*f->get_float_or("absent", 2.5), 2.5);
  EXPECT_EQ(*f->get_bool_or("absent", true), true);
  EXPECT_EQ(*f->get_string_or("absent", "d"), "d");
  EXPECT_EQ(*f->get_bool_or("flag", false), true);
  EXPECT_FALSE(f->get_uint_or("llama.block_count", 5).has_value());
  EXPECT_FALSE(f->get_string_or("neg", "d").has_value());
  EXPECT_FALSE(f->get_float_or("strs", 1.0).has_value());
  EXPECT_FALSE(f->get_bool_or("neg", true).has_value());
}

TEST(GgufValue, TypeNames) {
  EXPECT_STREQ(value_type_name(ValueType::kUint32), "uint32");
  EXPECT_STREQ(value_type_name(ValueType::kString), "string");
  EXPECT_STREQ(value_type_name(ValueType::kArray), "array");
  EXPECT_STREQ(value_type_name(ValueType::kFloat64), "float64");
  EXPECT_STREQ(value_type_name(static_cast<ValueType>(99)), "invalid");
}

// ---- the llama.cpp-made reference files ----

std::vector<std::string> ref_ggufs() {
  std::vector<std::string> out;
  for (const char* dir : {"models", "vocab", "needle"}) {
    std::filesystem::path p = ref_path(dir);
    if (!std::filesystem::is_directory(p)) continue;
    for (const auto& e : std::filesystem::directory_iterator(p))
      if (e.path().extension() == ".gguf") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GgufRef, ReadsEveryReferenceFile) {
  SUSTAIN_REQUIRE_REF();
  auto files = ref_ggufs();
  ASSERT_GE(files.size(), 20u);
  for (const auto& path : files) {
    SCOPED_TRACE(path);
    auto f = File::open(path);
    ASSERT_TRUE(f.has_value()) << f.status().message();
    EXPECT_TRUE(f->version() == 2 || f->version() == 3);
    EXPECT_TRUE(f->has("general.architecture"));
    uint64_t data_size = f->tensors().empty() ? 0 : f->file_size() - f->data_offset();
    uint64_t total = 0;
    for (const auto& t : f->tensors()) {
      EXPECT_LE(t.offset + t.n_bytes, data_size) << t.name;
      EXPECT_GE(t.data, f->mapping()->data());
      EXPECT_LE(t.data + t.n_bytes, f->mapping()->data() + f->file_size()) << t.name;
      total += t.n_bytes;
    }
    EXPECT_LE(total, data_size);
    // Every metadata key answers its own accessor family without crashing.
    for (const auto& [k, v] : f->metadata()) EXPECT_EQ(f->find(k), &v);
  }
}

TEST(GgufRef, TinyLlamaFacts) {
  SUSTAIN_REQUIRE_REF();
  auto f = File::open(ref_path("models/tiny-llama-f32.gguf"));
  ASSERT_TRUE(f.has_value()) << f.status().message();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 23u);
  EXPECT_EQ(f->tensors().size(), 30u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_uint("llama.block_count"), 3u);
  EXPECT_EQ(*f->get_uint("llama.embedding_length"), 256u);
  EXPECT_EQ(*f->get_uint("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(*f->get_float("llama.rope.freq_base"), 10000.0);
  EXPECT_NEAR(*f->get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.has_value()) << tokens.status().message();
  EXPECT_EQ(tokens->size(), 512u);
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type")->size(), 512u);
  EXPECT_EQ(*f->get_uint("tokenizer.ggml.padding_token_id"), 4294967295u);

  const TensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, QType::F32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 256}));  // [vocab, d], PyTorch order
  EXPECT_EQ(emb->ne, (std::vector<uint64_t>{256, 512}));
  EXPECT_EQ(emb->n_bytes, 512u * 256u * 4u);
  const TensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->offset, 525312u);
  const TensorInfo* k = f->find_tensor("blk.0.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{64, 256}));
  // The file holds finite weights.
  const float* w = reinterpret_cast<const float*>(emb->data);
  for (uint64_t i = 0; i < emb->n_elements; i += 997) EXPECT_TRUE(std::isfinite(w[i]));
}

TEST(GgufRef, QuantizedTypes) {
  SUSTAIN_REQUIRE_REF();
  auto f = File::open(ref_path("models/tiny-llama-Q4_K_M.gguf"));
  ASSERT_TRUE(f.has_value()) << f.status().message();
  const TensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, QType::Q4_K);
  EXPECT_EQ(q->n_bytes, 256u * 256u / 256u * 144u);
  auto q8 = File::open(ref_path("models/tiny-llama-Q8_0.gguf"));
  ASSERT_TRUE(q8.has_value()) << q8.status().message();
  EXPECT_EQ(q8->find_tensor("blk.0.attn_q.weight")->type, QType::Q8_0);
}

TEST(GgufRef, CopyThroughWriterIsByteIdentical) {
  SUSTAIN_REQUIRE_REF();
  // llama.cpp pads every tensor to the alignment and orders data as the infos,
  // exactly as our writer does, so re-writing a file reproduces it.
  std::string src = ref_path("models/aidreams260K-Q8_0.gguf");
  auto f = File::open(src);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  Writer w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  for (const auto& t : f->tensors()) ASSERT_TRUE(w.add_tensor(t.name, t.type, t.shape, t.data));
  std::string out = tmp_path("aidreams-copy.gguf");
  ASSERT_TRUE(w.write(out));
  EXPECT_EQ(read_all(src), read_all(out));
}

}  // namespace
}  // namespace sustain::gguf
