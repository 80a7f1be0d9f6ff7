// torch.save's format: a zip archive (records stored, not compressed) of `<archive>/data.pkl`, a
// pickle (protocol 2) of the saved object whose tensors are _rebuild_tensor_v2(storage, offset, size,
// stride, ...) calls, each storage a persistent id ("storage", torch.<Type>Storage, key, location,
// numel) naming the record `<archive>/data/<key>` that holds its bytes.
#include <arc/fabric/detail/torch_load.h>

#include <arc/base/error.h>
#include <arc/fabric/detail/read_file.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>

namespace arc::detail {
namespace {

template <typename T>
T little(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

// Where a record's bytes are in the file.
struct ZipRecord {
  uint64_t offset = 0, size = 0;
  bool compressed = false;
};

constexpr uint32_t kSaturated32 = 0xFFFFFFFF;

// Reads the zip64 extended fields of a directory entry: each field that the entry saturates is
// there, in the order size, compressed size, local header offset.
void read_zip64_fields(const char* extra, size_t length, const std::string& what, std::vector<uint64_t*> fields) {
  for (size_t at = 0; at + 4 <= length;) {
    const auto id = little<uint16_t>(extra + at);
    const size_t size = little<uint16_t>(extra + at + 2);
    ARC_CHECK(at + 4 + size <= length, what, " has a zip directory entry whose extra fields overrun it; the file is ",
              "corrupt");
    size_t field = at + 4;
    for (uint64_t* value : fields) {
      if (id != 1 || *value != kSaturated32) continue;
      ARC_CHECK(field + 8 <= at + 4 + size, what, " has a zip64 field too short for its sizes; the file is corrupt");
      *value = little<uint64_t>(extra + field);
      field += 8;
    }
    at += 4 + size;
  }
}

// The archive's records by name, every one checked to lie inside the file.
std::map<std::string, ZipRecord> zip_directory(const ReadFile& file, const std::string& what) {
  const uint64_t size = file.size();
  ARC_CHECK(size >= 22, what, " is ", size, " bytes long, too short for a zip archive; it is truncated");
  const uint64_t tail_size = std::min<uint64_t>(size, 20 + 22 + 0xFFFF);  // a zip64 locator, the record, a comment
  std::string tail(tail_size, '\0');
  file.read_at(size - tail_size, tail.data(), tail.size());
  // The end record: the last "PK\5\6" whose comment ends where the file does.
  std::optional<size_t> end;
  for (size_t at = tail.size() - 22 + 1; at-- > 0 && !end;)
    if (tail.compare(at, 4, "PK\x05\x06") == 0 && at + 22 + little<uint16_t>(&tail[at + 20]) == tail.size()) end = at;
  ARC_CHECK(end, what, " has no zip directory at its end; it is truncated");
  const char* record = &tail[*end];
  uint64_t count = little<uint16_t>(record + 10), dir_size = little<uint32_t>(record + 12),
           dir_offset = little<uint32_t>(record + 16);
  if (count == 0xFFFF || dir_size == kSaturated32 || dir_offset == kSaturated32) {
    ARC_CHECK(*end >= 20 && tail.compare(*end - 20, 4, "PK\x06\x07") == 0, what,
              " has a saturated zip directory record but no zip64 locator; the file is corrupt");
    const auto at = little<uint64_t>(&tail[*end - 20 + 8]);
    ARC_CHECK(at <= size && size - at >= 56, what, " has its zip64 directory record past its end; it is truncated");
    char zip64[56];
    file.read_at(at, zip64, sizeof zip64);
    ARC_CHECK(std::memcmp(zip64, "PK\x06\x06", 4) == 0, what, " has a corrupt zip64 directory record");
    count = little<uint64_t>(zip64 + 32);
    dir_size = little<uint64_t>(zip64 + 40);
    dir_offset = little<uint64_t>(zip64 + 48);
  }
  ARC_CHECK(dir_offset <= size && dir_size <= size - dir_offset && count <= dir_size / 46, what,
            " declares a zip directory of ", count, " entries in ", dir_size, " bytes at byte ", dir_offset,
            ", which its ", size, " bytes cannot hold; it is truncated or corrupt");
  std::string directory(dir_size, '\0');
  file.read_at(dir_offset, directory.data(), directory.size());
  std::map<std::string, ZipRecord> records;
  size_t at = 0;
  for (uint64_t i = 0; i < count; ++i) {
    ARC_CHECK(directory.size() - at >= 46 && directory.compare(at, 4, "PK\x01\x02") == 0, what,
              " has a corrupt zip directory at entry ", i);
    const char* entry = &directory[at];
    const size_t name_size = little<uint16_t>(entry + 28), extra_size = little<uint16_t>(entry + 30),
                 comment_size = little<uint16_t>(entry + 32);
    ARC_CHECK(directory.size() - at - 46 >= name_size + extra_size + comment_size, what,
              " has a zip directory entry that overruns the directory; the file is corrupt");
    const std::string name = directory.substr(at + 46, name_size);
    uint64_t stored = little<uint32_t>(entry + 24), compressed = little<uint32_t>(entry + 20),
             local = little<uint32_t>(entry + 42);
    read_zip64_fields(entry + 46 + name_size, extra_size, what, {&stored, &compressed, &local});
    const bool deflated = little<uint16_t>(entry + 10) != 0 || compressed != stored;
    ARC_CHECK(local <= size && size - local >= 30, "record '", name, "' of ", what, " starts past the file's end; ",
              "it is truncated or corrupt");
    char header[30];
    file.read_at(local, header, sizeof header);
    ARC_CHECK(std::memcmp(header, "PK\x03\x04", 4) == 0, "record '", name, "' of ", what,
              " has no local header where the directory says; the file is corrupt");
    const uint64_t data = local + 30 + little<uint16_t>(header + 26) + little<uint16_t>(header + 28);
    ARC_CHECK(data <= size && compressed <= size - data, "record '", name, "' of ", what, " declares ", compressed,
              " bytes at byte ", data, ", past the end of its ", size, " bytes; the file is truncated or corrupt");
    ARC_CHECK(records.emplace(name, ZipRecord{data, stored, deflated}).second, what, " names record '", name,
              "' twice; the file is corrupt");
    at += 46 + name_size + extra_size + comment_size;
  }
  return records;
}

// One value that the pickle builds. Values live in one vector and refer to each other by index,
// so that any nesting or sharing the pickle describes costs no recursion.
struct Value {
  enum class Kind : uint8_t {
    none,
    boolean,
    integer,
    real,
    text,
    bytes,
    tuple,
    list,
    dict,
    global,
    dtype,
    storage,
    tensor
  };
  Kind kind = Kind::none;
  torch::Dtype dtype = torch::kFloat;  // dtype, storage and tensor
  // boolean and integer; a storage's size in elements; a tensor's index in Unpickler::tensor().
  int64_t integer = 0;
  double real = 0;
  std::string text;           // text and bytes; a global's "module.name"; a storage's record key
  std::vector<size_t> items;  // tuple and list; a dict's keys and values, alternating
};

// A tensor: a view of a storage (a Value), its offset and strides in elements.
struct TensorView {
  size_t storage = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
};

// What one pickle may make this reader hold, in bytes: a constant and a multiple of its size
// (torch.save's state_dicts take about 10 times theirs). Every value, stack and memo entry, copied
// text and item counts against it, so that no pickle, however crafted, holds or walks more.
constexpr uint64_t kBudgetBase = 64 << 20;
constexpr uint64_t kBudgetPerByte = 32;

// Whether a view of `sizes` and `strides` covers its elements in order without gaps.
bool contiguous(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

const char* kind_name(Value::Kind kind) {
  static const char* names[] = {"None",   "a bool", "an int",   "a float", "a str",     "a bytes", "a tuple",
                                "a list", "a dict", "a global", "a dtype", "a storage", "a tensor"};
  return names[static_cast<int>(kind)];
}

// The bytes of a text whose characters are all below 256 (Python's text.encode("latin1")), from
// its UTF-8.
std::optional<std::string> latin1(const std::string& utf8) {
  std::string out;
  for (size_t i = 0; i < utf8.size(); ++i) {
    const auto byte = static_cast<uint8_t>(utf8[i]);
    if (byte < 0x80) {
      out += static_cast<char>(byte);
    } else if ((byte & 0xFE) == 0xC2 && i + 1 < utf8.size() && (static_cast<uint8_t>(utf8[i + 1]) & 0xC0) == 0x80) {
      out += static_cast<char>((byte & 0x03) << 6 | (static_cast<uint8_t>(utf8[++i]) & 0x3F));
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// torch.<Name>Storage -> its element type.
std::optional<torch::Dtype> storage_dtype(const std::string& global) {
  static const std::map<std::string, torch::Dtype> types = {
      {"torch.DoubleStorage", torch::kDouble}, {"torch.FloatStorage", torch::kFloat},
      {"torch.HalfStorage", torch::kHalf},     {"torch.BFloat16Storage", torch::kBFloat16},
      {"torch.LongStorage", torch::kLong},     {"torch.IntStorage", torch::kInt},
      {"torch.ShortStorage", torch::kShort},   {"torch.CharStorage", torch::kChar},
      {"torch.ByteStorage", torch::kByte},     {"torch.BoolStorage", torch::kBool},
      {"torch.UntypedStorage", torch::kByte}};
  const auto found = types.find(global);
  return found == types.end() ? std::nullopt : std::optional<torch::Dtype>(found->second);
}

// torch.<dtype> -> the type.
std::optional<torch::Dtype> dtype_global(const std::string& global) {
  static const std::map<std::string, torch::Dtype> types = {
      {"torch.float64", torch::kDouble},    {"torch.float32", torch::kFloat}, {"torch.float16", torch::kHalf},
      {"torch.bfloat16", torch::kBFloat16}, {"torch.int64", torch::kLong},    {"torch.int32", torch::kInt},
      {"torch.int16", torch::kShort},       {"torch.int8", torch::kChar},     {"torch.uint8", torch::kByte},
      {"torch.bool", torch::kBool}};
  const auto found = types.find(global);
  return found == types.end() ? std::nullopt : std::optional<torch::Dtype>(found->second);
}

// The functions a pickle may call: each builds a value here, none runs anything.
const std::vector<std::string>& callables() {
  static const std::vector<std::string> names = {"collections.OrderedDict",
                                                 "torch._utils._rebuild_tensor_v2",
                                                 "torch._utils._rebuild_tensor",
                                                 "torch._utils._rebuild_parameter",
                                                 "torch._utils._rebuild_parameter_with_state",
                                                 "torch.Size",
                                                 "torch.jit._pickle.restore_type_tag",
                                                 "_codecs.encode"};
  return names;
}

// Reads a pickle into Values. `record_bytes` gives the size of a storage's record by its key.
class Unpickler {
 public:
  Unpickler(const std::string& pickle, std::string what, std::string hint,
            std::function<uint64_t(const std::string&)> record_bytes)
      : pickle_(pickle),
        what_(std::move(what)),
        hint_(std::move(hint)),
        record_bytes_(std::move(record_bytes)),
        budget_(kBudgetBase + kBudgetPerByte * pickle.size()) {}

  // The pickled object.
  size_t load() {
    for (;;) {
      at_ = pos_;
      const auto op = static_cast<uint8_t>(*take(1));
      switch (op) {
        case 0x80:
          check(static_cast<uint8_t>(*take(1)) <= 5, "names a pickle protocol above 5");
          break;
        case 0x95:
          take(8);
          break;  // FRAME
        case '.':
          check(stack_.size() == 1 && marks_.empty(), "ends with ", stack_.size(), " values on its stack");
          return stack_.back();
        case '(':
          spend(sizeof(size_t));
          marks_.push_back(stack_.size());
          break;
        case ')':
          push(Value::Kind::tuple);
          break;
        case ']':
          push(Value::Kind::list);
          break;
        case '}':
          push(Value::Kind::dict);
          break;
        case 't':
          collection(Value::Kind::tuple, pop_mark());
          break;
        case 0x85:
        case 0x86:
        case 0x87:
          collection(Value::Kind::tuple, pop_count(op - 0x84));
          break;
        case 'l':
          collection(Value::Kind::list, pop_mark());
          break;
        case 'd':
          collection(Value::Kind::dict, pop_mark());
          break;
        case 'a':
          add_items(Value::Kind::list, pop_count(1));
          break;
        case 'e':
          add_items(Value::Kind::list, pop_mark());
          break;
        case 's':
          add_items(Value::Kind::dict, pop_count(2));
          break;
        case 'u':
          add_items(Value::Kind::dict, pop_mark());
          break;
        case 'N':
          push(Value::Kind::none);
          break;
        case 0x88:
        case 0x89:
          push(Value::Kind::boolean).integer = op == 0x88;
          break;
        case 'J':
          push(Value::Kind::integer).integer = little<int32_t>(take(4));
          break;
        case 'K':
          push(Value::Kind::integer).integer = static_cast<uint8_t>(*take(1));
          break;
        case 'M':
          push(Value::Kind::integer).integer = little<uint16_t>(take(2));
          break;
        case 0x8a:
          push(Value::Kind::integer).integer = long_integer(static_cast<uint8_t>(*take(1)));
          break;
        case 0x8b:
          push(Value::Kind::integer).integer = long_integer(little<uint32_t>(take(4)));
          break;
        case 'G': {
          const char* bytes = take(8);  // big-endian
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = bits << 8 | static_cast<uint8_t>(bytes[i]);
          double real;
          std::memcpy(&real, &bits, sizeof real);
          push(Value::Kind::real).real = real;
          break;
        }
        case 'X':
          text(Value::Kind::text, little<uint32_t>(take(4)));
          break;
        case 0x8c:
          text(Value::Kind::text, static_cast<uint8_t>(*take(1)));
          break;
        case 0x8d:
          text(Value::Kind::text, little<uint64_t>(take(8)));
          break;
        case 'T':
          text(Value::Kind::text, little<uint32_t>(take(4)));
          break;
        case 'U':
          text(Value::Kind::text, static_cast<uint8_t>(*take(1)));
          break;
        case 'B':
          text(Value::Kind::bytes, little<uint32_t>(take(4)));
          break;
        case 'C':
          text(Value::Kind::bytes, static_cast<uint8_t>(*take(1)));
          break;
        case 0x8e:
          text(Value::Kind::bytes, little<uint64_t>(take(8)));
          break;
        case 'q':
          remember(static_cast<uint8_t>(*take(1)));
          break;
        case 'r':
          remember(little<uint32_t>(take(4)));
          break;
        case 0x94:
          remember(memo_.size());
          break;
        case 'h':
          push_index(memo(static_cast<uint8_t>(*take(1))));
          break;
        case 'j':
          push_index(memo(little<uint32_t>(take(4))));
          break;
        case 'c': {
          auto module = line();
          global(module + "." + line());
          break;
        }
        case 0x93: {
          const auto names = pop_count(2);
          check(kind(names[0]) == Value::Kind::text && kind(names[1]) == Value::Kind::text,
                "names a global by values that are not text");
          global(values_[names[0]].text + "." + values_[names[1]].text);
          break;
        }
        case 'Q':
          storage(pop_count(1)[0]);
          break;
        case 'R': {
          const auto call = pop_count(2);
          reduce(call[0], call[1]);
          break;
        }
        case 'b': {
          // Attributes set on a dict (a state_dict's _metadata) or a tensor: not weights, left out.
          pop_count(1);
          const auto target = kind(top_index());
          check(target == Value::Kind::dict || target == Value::Kind::tensor, "sets attributes on ", kind_name(target),
                ", which only a Python object has");
          break;
        }
        case '0':
          pop_count(1);
          break;
        case '1':
          pop_mark();
          break;
        case '2':
          push_index(top_index());
          break;
        case 0x81:
        case 0x92:
        case 'i':
        case 'o':
          fail("builds a Python object from its class; Arclight reads only tensors, dicts, lists and plain ",
               "values, as torch.load(weights_only=True) does, and runs nothing a file says", hint_);
        default:
          fail("holds pickle opcode ", static_cast<int>(op), ", which a file of weights does not use");
      }
    }
  }

  const Value& operator[](size_t index) const { return values_[index]; }
  const TensorView& tensor(const Value& value) const { return tensors_[static_cast<size_t>(value.integer)]; }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    ARC_FAIL(what_, ": its pickle ", args..., " (at byte ", at_, " of data.pkl)");
  }
  template <typename... Args>
  void check(bool ok, const Args&... args) const {
    if (!ok) fail(args...);
  }

  const char* take(uint64_t size) {
    check(size <= pickle_.size() - pos_, "ends in the middle of a value; the file is truncated or corrupt");
    const char* at = pickle_.data() + pos_;
    pos_ += size;
    return at;
  }
  std::string line() {
    const auto end = pickle_.find('\n', pos_);
    check(end != std::string::npos, "ends in the middle of a global's name; the file is truncated or corrupt");
    auto out = pickle_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  int64_t long_integer(uint64_t size) {
    check(size <= 8, "holds an integer of ", size, " bytes, wider than 64 bits");
    const char* bytes = take(size);
    uint64_t value = 0;
    for (uint64_t i = 0; i < size; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    if (size > 0 && size < 8 && (bytes[size - 1] & 0x80)) value |= ~uint64_t{0} << (8 * size);  // sign
    return static_cast<int64_t>(value);
  }
  void text(Value::Kind kind, uint64_t size) {
    const char* bytes = take(size);
    spend(size);
    push(kind).text.assign(bytes, size);
  }

  // Counts `bytes` against the budget.
  void spend(uint64_t bytes) {
    check(bytes <= budget_ - spent_, "builds more than ", budget_ >> 20, " MiB of values, more than a state_dict ",
          "of its size does; the file is corrupt or crafted");
    spent_ += bytes;
  }
  void push_index(size_t index) {
    spend(sizeof(size_t));
    stack_.push_back(index);
  }
  void remember(uint64_t key) {
    spend(64);  // a node of memo_
    memo_[key] = top_index();
  }
  Value& push(Value::Kind kind) {
    spend(sizeof(Value));
    values_.emplace_back();
    values_.back().kind = kind;
    push_index(values_.size() - 1);
    return values_.back();
  }
  size_t top_index() const {
    check(!stack_.empty(), "reads an empty stack; the file is corrupt");
    return stack_.back();
  }
  Value::Kind kind(size_t index) const { return values_[index].kind; }
  std::vector<size_t> pop_count(size_t count) {
    check(stack_.size() - (marks_.empty() ? 0 : marks_.back()) >= count, "reads an empty stack; the file is corrupt");
    std::vector<size_t> out(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return out;
  }
  std::vector<size_t> pop_mark() {
    check(!marks_.empty(), "ends a group it never began; the file is corrupt");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<size_t> out(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }
  size_t memo(uint64_t key) const {
    const auto found = memo_.find(key);
    check(found != memo_.end(), "reads memo entry ", key, ", which it never wrote; the file is corrupt");
    return found->second;
  }
  // A new tuple, list or dict of `items` (a dict's keys and values alternating).
  void collection(Value::Kind kind, std::vector<size_t> items) {
    spend(items.size() * sizeof(size_t));
    check(kind != Value::Kind::dict || items.size() % 2 == 0,
          "gives a dict a key without a value; the file is corrupt");
    push(kind).items = std::move(items);
  }
  // `items` appended to the list, or set in the dict, below them on the stack.
  void add_items(Value::Kind want, std::vector<size_t> items) {
    const size_t index = top_index();
    check(kind(index) == want, "adds items to ", kind_name(kind(index)), ", not to ", kind_name(want));
    check(want != Value::Kind::dict || items.size() % 2 == 0,
          "gives a dict a key without a value; the file is corrupt");
    spend(items.size() * sizeof(size_t));
    auto& target = values_[index].items;
    target.insert(target.end(), items.begin(), items.end());
  }

  void global(const std::string& name) {
    if (const auto dtype = dtype_global(name)) {
      push(Value::Kind::dtype).dtype = *dtype;
      return;
    }
    const bool known = storage_dtype(name) || std::count(callables().begin(), callables().end(), name) == 1;
    if (!known && name.rfind("torch._utils._rebuild_", 0) == 0)
      fail("holds a tensor that ", name, " rebuilds (sparse, quantized, nested or on the meta device); Arclight ",
           "reads dense tensors: save them with .to_dense() or .dequantize() first");
    check(known, "needs the Python object '", name, "'; Arclight reads only tensors, dicts, lists and plain values, ",
          "as torch.load(weights_only=True) does, and runs nothing a file says", hint_);
    push(Value::Kind::global).text = name;
  }

  int64_t integer(size_t index, const char* what) const {
    check(kind(index) == Value::Kind::integer, "gives ", what, " as ", kind_name(kind(index)), ", not an int");
    return values_[index].integer;
  }
  std::vector<int64_t> integers(size_t index, const char* what) {
    check(kind(index) == Value::Kind::tuple, "gives ", what, " as ", kind_name(kind(index)), ", not a tuple");
    check(values_[index].items.size() <= 64, "gives ", what, " of ", values_[index].items.size(),
          " dimensions; a tensor has at most 64");
    spend(values_[index].items.size() * sizeof(int64_t));
    std::vector<int64_t> out;
    for (const size_t item : values_[index].items) out.push_back(integer(item, what));
    return out;
  }

  // A persistent id: ("storage", torch.<Type>Storage, key, location, size in elements).
  void storage(size_t id) {
    const auto& items = values_[id].items;
    check(kind(id) == Value::Kind::tuple && items.size() == 5 && kind(items[0]) == Value::Kind::text &&
              values_[items[0]].text == "storage" && kind(items[1]) == Value::Kind::global &&
              storage_dtype(values_[items[1]].text) && kind(items[2]) == Value::Kind::text,
          "refers to an object outside it that is not a storage ('storage', torch.<Type>Storage, key, location, ",
          "size)");
    const auto dtype = *storage_dtype(values_[items[1]].text);
    const auto key = values_[items[2]].text;
    const int64_t numel = integer(items[4], "a storage's size");
    const uint64_t bytes = record_bytes_(key);
    check(numel >= 0 && static_cast<uint64_t>(numel) <= bytes / c10::elementSize(dtype), "declares storage '", key,
          "' of ", numel, " ", c10::toString(dtype), " elements, but its record holds ", bytes,
          " bytes; the file is corrupt");
    spend(key.size());
    auto& value = push(Value::Kind::storage);
    value.dtype = dtype;
    value.text = key;
    value.integer = numel;
  }

  // fn(*args) for the functions that build values.
  void reduce(size_t fn, size_t args_index) {
    check(kind(fn) == Value::Kind::global && kind(args_index) == Value::Kind::tuple, "calls ", kind_name(kind(fn)),
          " with ", kind_name(kind(args_index)), "; the file is corrupt");
    const auto& name = values_[fn].text;
    const auto args = values_[args_index].items;
    const auto arity = [&](size_t low, size_t high) {
      check(args.size() >= low && args.size() <= high, "calls ", name, " with ", args.size(), " arguments");
    };
    if (name == "collections.OrderedDict") {
      arity(0, 0);
      push(Value::Kind::dict);
    } else if (name == "torch.Size") {
      arity(1, 1);
      integers(args[0], "a size");
      push_index(args[0]);
    } else if (name == "_codecs.encode") {  // bytes, as protocol 2 writes them: encode(text, "latin1")
      arity(2, 2);
      check(
          kind(args[0]) == Value::Kind::text && kind(args[1]) == Value::Kind::text && values_[args[1]].text == "latin1",
          "calls _codecs.encode other than as bytes are pickled");
      spend(values_[args[0]].text.size());
      auto bytes = latin1(values_[args[0]].text);
      check(bytes.has_value(), "encodes text to latin1 that has characters beyond it");
      push(Value::Kind::bytes).text = std::move(*bytes);
    } else if (name == "torch.jit._pickle.restore_type_tag") {
      arity(2, 2);
      push_index(args[0]);
    } else if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      arity(3, 4);
      check(kind(args[0]) == Value::Kind::tensor, "makes a parameter of ", kind_name(kind(args[0])));
      push_index(args[0]);
    } else if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      arity(4, 7);
      tensor(args);
    } else {
      fail("calls ", name, ", which builds nothing Arclight reads");
    }
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, ...): a view of the storage, checked to lie
  // inside it.
  void tensor(const std::vector<size_t>& args) {
    check(kind(args[0]) == Value::Kind::storage, "rebuilds a tensor from ", kind_name(kind(args[0])),
          ", not a storage");
    const int64_t offset = integer(args[1], "a tensor's offset");
    auto sizes = integers(args[2], "a tensor's size");
    auto strides = integers(args[3], "a tensor's strides");
    const auto& storage = values_[args[0]];
    check(sizes.size() == strides.size() && sizes.size() <= 64, "gives a tensor ", sizes.size(), " sizes and ",
          strides.size(), " strides");
    check(offset >= 0 && offset <= storage.integer, "puts a tensor at offset ", offset, " of storage '", storage.text,
          "', which holds ", storage.integer, " elements; the file is corrupt");
    // The view's last element must lie inside the storage, and it may not have more elements than
    // the storage (a view that repeats elements, with a stride of 0, would be read into that many).
    int64_t last = offset, numel = 1;
    for (size_t d = 0; d < sizes.size(); ++d) {
      check(sizes[d] >= 0 && strides[d] >= 0, "gives a tensor a negative size or stride");
      int64_t reach = 0;
      check(!__builtin_mul_overflow(std::max<int64_t>(sizes[d] - 1, 0), strides[d], &reach) &&
                !__builtin_add_overflow(last, reach, &last) && !__builtin_mul_overflow(numel, sizes[d], &numel),
            "gives a tensor a size that overflows");
    }
    check(numel == 0 || (last < storage.integer && numel <= storage.integer), "puts a tensor of size ",
          c10::IntArrayRef(sizes), " at offset ", offset, " of storage '", storage.text, "', which holds ",
          storage.integer, " elements; the file is corrupt");
    const auto dtype = storage.dtype;  // before push moves the values
    spend(sizeof(TensorView) + 2 * sizes.size() * sizeof(int64_t));
    tensors_.push_back({args[0], offset, std::move(sizes), std::move(strides)});
    auto& value = push(Value::Kind::tensor);
    value.dtype = dtype;
    value.integer = static_cast<int64_t>(tensors_.size() - 1);
  }

  const std::string& pickle_;
  std::string what_, hint_;
  std::function<uint64_t(const std::string&)> record_bytes_;
  size_t pos_ = 0, at_ = 0;
  std::vector<Value> values_;
  std::vector<TensorView> tensors_;
  std::vector<size_t> stack_, marks_;
  std::unordered_map<uint64_t, size_t> memo_;
  uint64_t budget_, spent_ = 0;
};

// The state_dict of a torch.save file, its tensors read from the archive's records.
class TorchFileReader : public WeightsReader {
 public:
  explicit TorchFileReader(const std::string& path) : file_(path, "PyTorch file", "check the file system") {
    const std::string what = "PyTorch file '" + path + "'";
    records_ = zip_directory(file_, what);
    std::string archive;
    bool torchscript = false;
    for (const auto& [name, record] : records_) {
      const auto slash = name.find('/');
      if (slash == std::string::npos) continue;
      const auto rest = name.substr(slash + 1);
      if (rest == "data.pkl") {
        ARC_CHECK(archive.empty(), what, " holds two pickles ('", archive, "data.pkl' and '", name,
                  "'); it is not one torch.save wrote");
        archive = name.substr(0, slash + 1);
      }
      torchscript = torchscript || rest.rfind("code/", 0) == 0 || rest == "constants.pkl";
    }
    ARC_CHECK(!archive.empty(), what, " is a zip archive without a data.pkl; it is not a file torch.save wrote");
    const auto order = records_.find(archive + "byteorder");
    if (order != records_.end()) {
      ARC_CHECK(!order->second.compressed, "record '", order->first, "' of ", what, " is compressed; torch.save ",
                "stores its records as they are: save the file again with torch.save");
      std::string text(std::min<uint64_t>(order->second.size, 16), '\0');
      file_.read_at(order->second.offset, text.data(), text.size());
      ARC_CHECK(text == "little", what, " was written on a big-endian machine (byteorder '", text,
                "'); load and save it again with PyTorch on a little-endian one");
    }
    const std::string hint = torchscript ? "; this is a TorchScript archive (torch.jit.save, or LibTorch's "
                                           "torch::save of a module): save model.state_dict() with torch.save instead"
                                         : "";
    const auto& pickled = records_.at(archive + "data.pkl");
    ARC_CHECK(!pickled.compressed, what, " has its pickle compressed", hint,
              "; torch.save stores its records as they are: save the file again with torch.save");
    std::string pickle(pickled.size, '\0');
    file_.read_at(pickled.offset, pickle.data(), pickle.size());
    Unpickler unpickler(pickle, what, hint, [&](const std::string& key) {
      const auto found = records_.find(archive + "data/" + key);
      ARC_CHECK(found != records_.end(), what, " refers to storage '", key, "', but holds no record '", archive,
                "data/", key, "'; the file is corrupt");
      ARC_CHECK(!found->second.compressed, "record '", found->first, "' of ", what,
                " is compressed; torch.save stores its records as they are: save the file again with torch.save");
      return found->second.size;
    });
    const size_t root = unpickler.load();
    read_state(unpickler, root, what, archive);
  }

  const std::vector<WeightEntry>& entries() const override { return entries_; }
  WeightsMetadata metadata() const override { return metadata_; }

  void read_into(const std::string& name, const torch::Tensor& into) const override {
    const auto found = views_.find(name);
    ARC_CHECK(found != views_.end(), "PyTorch file '", file_.path(), "' holds no tensor '", name, "'");
    const auto& view = found->second;
    ARC_CHECK(into.sizes() == c10::IntArrayRef(view.sizes), "tensor '", name, "' of '", file_.path(), "' has shape ",
              c10::IntArrayRef(view.sizes), ", the destination ", into.sizes(), "; read it into a tensor of its shape");
    int64_t extent = 1;  // elements from the first to the last that the view reaches
    for (size_t d = 0; d < view.sizes.size(); ++d) {
      if (view.sizes[d] == 0) return;
      extent += (view.sizes[d] - 1) * view.strides[d];
    }
    const auto item = static_cast<uint64_t>(c10::elementSize(view.dtype));
    const uint64_t at = view.record.offset + static_cast<uint64_t>(view.offset) * item;
    if (contiguous(view.sizes, view.strides) && into.device().is_cpu() && into.scalar_type() == view.dtype &&
        into.is_contiguous()) {
      file_.read_at(at, into.data_ptr(), into.nbytes());
      return;
    }
    const auto span = torch::empty({extent}, torch::TensorOptions().dtype(view.dtype));
    file_.read_at(at, span.data_ptr(), span.nbytes());
    torch::NoGradGuard no_grad;
    into.copy_(span.as_strided(view.sizes, view.strides));
  }

 private:
  struct View {
    ZipRecord record;
    torch::Dtype dtype;
    int64_t offset;
    std::vector<int64_t> sizes, strides;
  };

  // The root's state_dict: the root itself, or its "state_dict" (a Lightning checkpoint's).
  void read_state(const Unpickler& values, size_t root, const std::string& what, const std::string& archive) {
    const auto& top = values[root];
    ARC_CHECK(top.kind == Value::Kind::dict, what, " holds ", kind_name(top.kind),
              ", not a state_dict; save model.state_dict() with torch.save");
    size_t state = root;
    std::vector<std::string> keys;
    for (size_t i = 0; i < top.items.size(); i += 2) {
      const auto& key = values[top.items[i]];
      const auto& value = values[top.items[i + 1]];
      if (key.kind != Value::Kind::text) continue;
      if (keys.size() < 9) keys.push_back(key.text);  // for the error below
      if (key.text == "state_dict" && value.kind == Value::Kind::dict) state = top.items[i + 1];
      if ((key.text == "epoch" || key.text == "global_step") && value.kind == Value::Kind::integer)
        metadata_[key.text] = std::to_string(value.integer);
      if (key.text == "pytorch-lightning_version" && value.kind == Value::Kind::text) metadata_[key.text] = value.text;
    }
    if (state == root) metadata_.clear();
    const auto& dict = values[state];
    for (size_t i = 0; i < dict.items.size(); i += 2) {
      const auto& key = values[dict.items[i]];
      const auto& value = values[dict.items[i + 1]];
      ARC_CHECK(key.kind == Value::Kind::text, what, " has a state_dict key that is ", kind_name(key.kind),
                ", not a name");
      if (value.kind != Value::Kind::tensor) {
        std::string listed;
        for (size_t k = 0; k < keys.size() && k < 8; ++k) listed += (k ? ", '" : "'") + keys[k] + "'";
        ARC_FAIL(what, " holds a dict whose '", key.text, "' is ", kind_name(value.kind),
                 ", so it is not a state_dict (name -> tensor), nor a checkpoint with one under 'state_dict' (its ",
                 "keys: ", listed, keys.size() > 8 ? ", ..." : "", "); save model.state_dict() alone with torch.save");
      }
      ARC_CHECK(views_.count(key.text) == 0, what, " names tensor '", key.text, "' twice; the file is corrupt");
      const auto& tensor = values.tensor(value);
      entries_.push_back({key.text, value.dtype, tensor.sizes});
      views_[key.text] = {records_.at(archive + "data/" + values[tensor.storage].text), value.dtype, tensor.offset,
                          tensor.sizes, tensor.strides};
    }
  }

  ReadFile file_;
  std::map<std::string, ZipRecord> records_;
  std::vector<WeightEntry> entries_;
  std::map<std::string, View> views_;
  WeightsMetadata metadata_;
};

}  // namespace

std::unique_ptr<WeightsReader> open_torch_file(const std::string& path) {
  return std::make_unique<TorchFileReader>(path);
}

}  // namespace arc::detail
