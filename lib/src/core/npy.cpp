// The NPY header: magic, version, the header dict (descr, fortran_order,
// shape), and the data size in checked arithmetic (a crafted header may
// claim 2^62 rows or a shape whose product overflows).
#include "core/npy.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "taoquant/error.h"

namespace tq::data {

namespace {

// Each element type: numpy's name, its NPY descr code (after the byte order)
// and its size in bytes.
struct ElemInfo {
  ElemType type;
  const char* name;
  const char* code;
  size_t size;
};
constexpr ElemInfo kElems[] = {{ElemType::kFloat32, "float32", "f4", 4},
                               {ElemType::kFloat64, "float64", "f8", 8},
                               {ElemType::kUInt8, "uint8", "u1", 1},
                               {ElemType::kInt32, "int32", "i4", 4},
                               {ElemType::kInt64, "int64", "i8", 8}};

const ElemInfo* info(ElemType t) {
  for (const auto& e : kElems)
    if (e.type == t) return &e;
  return nullptr;
}

}  // namespace

const char* elem_name(ElemType t) {
  const ElemInfo* e = info(t);
  return e ? e->name : "?";
}

size_t elem_size(ElemType t) {
  const ElemInfo* e = info(t);
  return e ? e->size : 1;
}

std::string supported_elems() {
  std::string out;
  for (const auto& e : kElems) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

namespace {

// numpy's name for a descr like '<f2' ("float16"), for messages.
std::string numpy_name(const std::string& descr) {
  if (descr.size() < 2) return descr;
  char kind = descr[1];
  const std::string size = descr.substr(2);
  // A byte count as numpy writes it (1 to 4 digits); anything else as written.
  if (size.empty() || size.size() > 4 || size.find_first_not_of("0123456789") != std::string::npos)
    return descr;
  const int n = std::stoi(size);
  switch (kind) {
    case 'f':
      return "float" + std::to_string(n * 8);
    case 'i':
      return "int" + std::to_string(n * 8);
    case 'u':
      return "uint" + std::to_string(n * 8);
    case 'c':
      return "complex" + std::to_string(n * 8);
    case 'b':
      return "bool";
    case 'O':
      return "object";
    case 'U':
      return "str";
    case 'S':
      return "bytes";
    case 'M':
      return "datetime64";
    case 'm':
      return "timedelta64";
    default:
      return descr;
  }
}

// The value after 'name': in a header dict, or "" when absent.
std::string dict_value(const std::string& h, const std::string& name) {
  for (const char* q : {"'", "\""}) {
    auto p = h.find(q + name + q);
    if (p == std::string::npos) continue;
    p = h.find(':', p);
    if (p == std::string::npos) return "";
    ++p;
    while (p < h.size() && h[p] == ' ') ++p;
    return h.substr(p);
  }
  return "";
}

// Row and data bytes; `overflow` when either (or the element count, which
// a tensor holds as int64) does not fit 63 bits.
void compute_sizes(NpyHeader& h) {
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  uint64_t row = 1;
  bool over = false;
  for (size_t i = 1; i < h.shape.size(); ++i)
    over = over || __builtin_mul_overflow(row, static_cast<uint64_t>(h.shape[i]), &row);
  uint64_t all = 0;
  over = over || __builtin_mul_overflow(row, static_cast<uint64_t>(h.shape[0]), &all);
  over = over || __builtin_mul_overflow(row, elem_size(h.type), &h.row_bytes);
  over = over || __builtin_mul_overflow(all, elem_size(h.type), &h.data_bytes);
  h.overflow = over || h.data_bytes > limit || h.row_bytes > limit;
}

// The element type of an NPY `descr` value ('<f4', ...).
ElemType parse_descr(const std::string& d, const std::string& where) {
  if (d.empty()) throw RuntimeError(where + ": NPY header has no 'descr'");
  if (d[0] == '[')
    throw RuntimeError(
        where +
        ": structured (record) arrays are not supported; supported dtypes: " + supported_elems());
  char quote = d[0];
  auto end = d.find(quote, 1);
  if ((quote != '\'' && quote != '"') || end == std::string::npos)
    throw RuntimeError(where + ": bad NPY descr in header");
  std::string descr = d.substr(1, end - 1);
  if (descr.size() < 3) throw RuntimeError(where + ": bad NPY descr '" + descr + "'");
  char order = descr[0];
  std::string code = descr.substr(1);
  bool one_byte = code == "u1" || code == "i1" || code == "b1";
  if (order == '>' && !one_byte)
    throw RuntimeError(
        where + ": big-endian dtype '" + descr + "' (" + numpy_name(descr) +
        ") is not supported; save little-endian data (x.astype(x.dtype.newbyteorder('<')))");
  for (const auto& e : kElems)
    if (code == e.code) return e.type;
  throw RuntimeError(where + ": unsupported dtype " + numpy_name(descr) + " ('" + descr +
                     "'); supported: " + supported_elems() +
                     " (convert with .astype(numpy.float32))");
}

// The dimensions of an NPY `shape` value ('(512, 1, 28, 28)').
std::vector<int64_t> parse_shape(const std::string& sh, const std::string& where) {
  std::vector<int64_t> shape;
  if (sh.empty() || sh[0] != '(') throw RuntimeError(where + ": NPY header has no shape");
  auto close = sh.find(')');
  if (close == std::string::npos) throw RuntimeError(where + ": bad NPY shape");
  std::string dims = sh.substr(1, close - 1);
  size_t p = 0;
  while (p < dims.size()) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ',')) ++p;
    if (p >= dims.size()) break;
    char* e = nullptr;
    errno = 0;
    long long v = std::strtoll(dims.c_str() + p, &e, 10);
    if (e == dims.c_str() + p || v < 0 || errno == ERANGE)
      throw RuntimeError(where + ": bad NPY shape '(" + dims + ")'");
    shape.push_back(v);
    p = static_cast<size_t>(e - dims.c_str());
  }
  return shape;
}

}  // namespace

NpyHeader read_npy_header(const std::function<size_t(char*, size_t)>& read,
                          const std::string& where) {
  char pre[10];
  if (read(pre, 8) != 8 || std::memcmp(pre, "\x93NUMPY", 6) != 0)
    throw RuntimeError(where +
                       ": not an NPY array (bad magic; expected a file written by numpy.save)");
  const int major = static_cast<unsigned char>(pre[6]);
  size_t len_bytes = major == 1 ? 2 : 4;
  if (major < 1 || major > 3)
    throw RuntimeError(where + ": unsupported NPY format version " + std::to_string(major));
  unsigned char lb[4] = {0, 0, 0, 0};
  if (read(reinterpret_cast<char*>(lb), len_bytes) != len_bytes)
    throw RuntimeError(where + ": truncated NPY header");
  size_t hlen = lb[0] | (lb[1] << 8) | (static_cast<size_t>(lb[2]) << 16) |
                (static_cast<size_t>(lb[3]) << 24);
  if (hlen > (1u << 20))
    throw RuntimeError(where + ": NPY header too large (" + std::to_string(hlen) + " bytes)");
  std::string h(hlen, '\0');
  if (read(h.data(), hlen) != hlen) throw RuntimeError(where + ": truncated NPY header");

  NpyHeader out;
  out.data_offset = 8 + len_bytes + hlen;

  out.type = parse_descr(dict_value(h, "descr"), where);
  std::string fo = dict_value(h, "fortran_order");
  if (fo.rfind("True", 0) == 0)
    throw RuntimeError(
        where +
        ": the array is stored in Fortran order; save a C-order array (numpy.ascontiguousarray)");

  out.shape = parse_shape(dict_value(h, "shape"), where);
  if (out.shape.empty())
    throw RuntimeError(where +
                       ": is a scalar; expected an array with one row per sample ([N, ...])");
  compute_sizes(out);
  return out;
}

void check_npy_size(const NpyHeader& h, uint64_t have, const std::string& where) {
  uint64_t need = 0;
  const bool overflow = h.overflow || __builtin_add_overflow(h.data_bytes, h.data_offset, &need);
  if (!overflow && need <= have) return;
  const std::string what = dims_str(h.shape) + " " + elem_name(h.type);
  const std::string claim = overflow ? "more than " +
                                           std::to_string(std::numeric_limits<int64_t>::max()) +
                                           " bytes (the shape " + what + " overflows)"
                                     : std::to_string(need) + " bytes (" + what + " after a " +
                                           std::to_string(h.data_offset) + "-byte header)";
  throw RuntimeError(where + ": header claims " + claim + ", file has " + std::to_string(have) +
                     " (a truncated or corrupt .npy)");
}

std::string dims_str(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace tq::data
