// A C ABI over mlx::core for rlx-mlx: arrays are opaque handles, every call returns NULL or an
// error string (free it with rlx_mlx_free_error), and C++ exceptions never cross into Rust.
// Ops go through one dispatcher keyed by name with integer and float attributes, so the Rust
// side owns the lowering and this file stays a thin table.

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlx/compile_impl.h"
#include "mlx/mlx.h"

namespace mx = mlx::core;

extern "C" {
typedef struct rlx_mlx_array rlx_mlx_array;
// Builds a function's outputs from its inputs (handles owned by the caller of the callback, outputs
// handed over); returns 0, or nonzero after failing (the Rust side keeps the message).
typedef int (*rlx_mlx_fn)(void* user, rlx_mlx_array* const* ins, size_t n_in, rlx_mlx_array** outs, size_t n_out);
}

struct rlx_mlx_compiled {
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> fun;
  std::uintptr_t id;
  size_t n_out;
};

namespace {

mx::array* get(rlx_mlx_array* a) { return reinterpret_cast<mx::array*>(a); }
rlx_mlx_array* put(mx::array a) { return reinterpret_cast<rlx_mlx_array*>(new mx::array(std::move(a))); }

char* error(const std::string& s) {
  char* e = static_cast<char*>(std::malloc(s.size() + 1));
  if (e) std::memcpy(e, s.c_str(), s.size() + 1);
  return e;
}

// RLX dtype codes (rlx-mlx's `dtype_code`).
mx::Dtype dtype(int code) {
  switch (code) {
    case 0: return mx::float32;
    case 1: return mx::float16;
    case 2: return mx::bfloat16;
    case 3: return mx::float64;
    case 4: return mx::int8;
    case 5: return mx::int16;
    case 6: return mx::int32;
    case 7: return mx::int64;
    case 8: return mx::uint8;
    case 9: return mx::uint32;
    case 10: return mx::bool_;
    case 11: return mx::complex64;
  }
  throw std::invalid_argument("unknown dtype code " + std::to_string(code));
}

struct Args {
  std::vector<mx::array> in;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  int dt;
  mx::Shape shape(size_t from, size_t n) const {
    mx::Shape s;
    for (size_t i = 0; i < n; i++) s.push_back(static_cast<int>(ints.at(from + i)));
    return s;
  }
  std::vector<int> axes(size_t from, size_t n) const {
    std::vector<int> v;
    for (size_t i = 0; i < n; i++) v.push_back(static_cast<int>(ints.at(from + i)));
    return v;
  }
};

using Op = std::function<mx::array(const Args&)>;

const std::unordered_map<std::string, Op>& ops() {
  static const std::unordered_map<std::string, Op> table = {
      // in: x, weight, bias; floats: eps.
      {"layer_norm",
       [](const Args& a) {
         return mx::fast::layer_norm(a.in[0], a.in[1], a.in[2], static_cast<float>(a.floats.at(0)));
       }},
      // in: x, weight; floats: eps.
      {"rms_norm",
       [](const Args& a) { return mx::fast::rms_norm(a.in[0], a.in[1], static_cast<float>(a.floats.at(0))); }},
      // in: q, k, v [, mask]; ints: 0 no mask, 1 causal (bottom-right aligned), 2 the mask input;
      // floats: scale.
      {"sdpa",
       [](const Args& a) {
         int mode = static_cast<int>(a.ints.at(0));
         std::optional<mx::array> mask;
         std::string mm = mode == 1 ? "causal" : "";
         if (mode == 2) {
           mm = "array";
           mask = a.in.at(3);
         }
         return mx::fast::scaled_dot_product_attention(a.in[0], a.in[1], a.in[2], static_cast<float>(a.floats.at(0)),
                                                       mm, mask);
       }},
      // A second handle to the same array (MLX arrays share their data).
      {"identity", [](const Args& a) { return a.in[0]; }},
      {"add", [](const Args& a) { return mx::add(a.in[0], a.in[1]); }},
      {"subtract", [](const Args& a) { return mx::subtract(a.in[0], a.in[1]); }},
      {"multiply", [](const Args& a) { return mx::multiply(a.in[0], a.in[1]); }},
      {"divide", [](const Args& a) { return mx::divide(a.in[0], a.in[1]); }},
      {"power", [](const Args& a) { return mx::power(a.in[0], a.in[1]); }},
      {"maximum", [](const Args& a) { return mx::maximum(a.in[0], a.in[1]); }},
      {"minimum", [](const Args& a) { return mx::minimum(a.in[0], a.in[1]); }},
      {"negative", [](const Args& a) { return mx::negative(a.in[0]); }},
      {"abs", [](const Args& a) { return mx::abs(a.in[0]); }},
      {"exp", [](const Args& a) { return mx::exp(a.in[0]); }},
      {"log", [](const Args& a) { return mx::log(a.in[0]); }},
      {"sqrt", [](const Args& a) { return mx::sqrt(a.in[0]); }},
      {"sin", [](const Args& a) { return mx::sin(a.in[0]); }},
      {"cos", [](const Args& a) { return mx::cos(a.in[0]); }},
      {"tanh", [](const Args& a) { return mx::tanh(a.in[0]); }},
      {"erf", [](const Args& a) { return mx::erf(a.in[0]); }},
      {"floor", [](const Args& a) { return mx::floor(a.in[0]); }},
      {"round", [](const Args& a) { return mx::round(a.in[0], 0); }},
      {"sign", [](const Args& a) { return mx::sign(a.in[0]); }},
      {"isnan", [](const Args& a) { return mx::isnan(a.in[0]); }},
      {"equal", [](const Args& a) { return mx::equal(a.in[0], a.in[1]); }},
      {"not_equal", [](const Args& a) { return mx::not_equal(a.in[0], a.in[1]); }},
      {"less", [](const Args& a) { return mx::less(a.in[0], a.in[1]); }},
      {"less_equal", [](const Args& a) { return mx::less_equal(a.in[0], a.in[1]); }},
      {"greater", [](const Args& a) { return mx::greater(a.in[0], a.in[1]); }},
      {"greater_equal", [](const Args& a) { return mx::greater_equal(a.in[0], a.in[1]); }},
      {"logical_or", [](const Args& a) { return mx::logical_or(a.in[0], a.in[1]); }},
      {"bitwise_and", [](const Args& a) { return mx::bitwise_and(a.in[0], a.in[1]); }},
      {"bitwise_or", [](const Args& a) { return mx::bitwise_or(a.in[0], a.in[1]); }},
      {"left_shift", [](const Args& a) { return mx::left_shift(a.in[0], a.in[1]); }},
      {"right_shift", [](const Args& a) { return mx::right_shift(a.in[0], a.in[1]); }},
      // Reinterprets the bytes as dt (the last axis scales with the item size).
      {"view", [](const Args& a) { return mx::view(a.in[0], dtype(a.dt)); }},
      {"where", [](const Args& a) { return mx::where(a.in[0], a.in[1], a.in[2]); }},
      {"astype", [](const Args& a) { return mx::astype(a.in[0], dtype(a.dt)); }},
      {"matmul", [](const Args& a) { return mx::matmul(a.in[0], a.in[1]); }},
      // ints: the new shape.
      {"reshape", [](const Args& a) { return mx::reshape(a.in[0], a.shape(0, a.ints.size())); }},
      {"broadcast_to", [](const Args& a) { return mx::broadcast_to(a.in[0], a.shape(0, a.ints.size())); }},
      // ints: the permutation.
      {"transpose", [](const Args& a) { return mx::transpose(a.in[0], a.axes(0, a.ints.size())); }},
      // ints: starts, stops, strides (rank each).
      {"slice",
       [](const Args& a) {
         size_t r = a.ints.size() / 3;
         return mx::slice(a.in[0], a.shape(0, r), a.shape(r, r), a.shape(2 * r, r));
       }},
      // ints: axis.
      {"concatenate",
       [](const Args& a) { return mx::concatenate(a.in, static_cast<int>(a.ints.at(0))); }},
      // ints: axes, then keepdims (last).
      {"sum", [](const Args& a) { return mx::sum(a.in[0], a.axes(0, a.ints.size() - 1), a.ints.back() != 0); }},
      {"prod", [](const Args& a) { return mx::prod(a.in[0], a.axes(0, a.ints.size() - 1), a.ints.back() != 0); }},
      {"max", [](const Args& a) { return mx::max(a.in[0], a.axes(0, a.ints.size() - 1), a.ints.back() != 0); }},
      {"min", [](const Args& a) { return mx::min(a.in[0], a.axes(0, a.ints.size() - 1), a.ints.back() != 0); }},
      {"mean", [](const Args& a) { return mx::mean(a.in[0], a.axes(0, a.ints.size() - 1), a.ints.back() != 0); }},
      // ints: axis, keepdims.
      {"argmax",
       [](const Args& a) { return mx::argmax(a.in[0], static_cast<int>(a.ints.at(0)), a.ints.at(1) != 0); }},
      // ints: axis.
      {"take", [](const Args& a) { return mx::take(a.in[0], a.in[1], static_cast<int>(a.ints.at(0))); }},
      // in: a, indices (same rank, broadcastable), updates; ints: axis.
      {"scatter_add_axis",
       [](const Args& a) {
         return mx::scatter_add_axis(a.in[0], a.in[1], a.in[2], static_cast<int>(a.ints.at(0)));
       }},
      // ints: axis, reverse, inclusive.
      {"cumsum",
       [](const Args& a) {
         return mx::cumsum(a.in[0], static_cast<int>(a.ints.at(0)), a.ints.at(1) != 0, a.ints.at(2) != 0);
       }},
      // ints: axis (stable sort along it).
      {"argsort", [](const Args& a) { return mx::argsort(a.in[0], static_cast<int>(a.ints.at(0))); }},
      {"take_along_axis",
       [](const Args& a) { return mx::take_along_axis(a.in[0], a.in[1], static_cast<int>(a.ints.at(0))); }},
      // in: x, start (1-element int array); ints: axis, size.
      {"dynamic_slice",
       [](const Args& a) {
         int axis = static_cast<int>(a.ints.at(0));
         mx::Shape size = a.in[0].shape();
         size[axis] = static_cast<int>(a.ints.at(1));
         return mx::slice(a.in[0], mx::reshape(a.in[1], {1}), std::vector<int>{axis}, size);
       }},
      // in: x, update, start; ints: axis.
      {"dynamic_update_slice",
       [](const Args& a) {
         int axis = static_cast<int>(a.ints.at(0));
         return mx::slice_update(a.in[0], a.in[1], mx::reshape(a.in[2], {1}), std::vector<int>{axis});
       }},
      // shape in ints; floats[0] the value; dt the dtype.
      {"full",
       [](const Args& a) {
         return mx::full(a.shape(0, a.ints.size()), mx::array(a.floats.at(0), mx::float64), dtype(a.dt));
       }},
      // floats: start, step; ints: n.
      {"arange",
       [](const Args& a) {
         double start = a.floats.at(0), step = a.floats.at(1);
         auto i = mx::arange(static_cast<double>(a.ints.at(0)), mx::float64);
         return mx::astype(mx::add(mx::multiply(i, mx::array(step, mx::float64)), mx::array(start, mx::float64)),
                           dtype(a.dt));
       }},
  };
  return table;
}

}  // namespace

extern "C" {

void rlx_mlx_free_error(char* e) { std::free(e); }

// Runs everything on the CPU stream: a CPU-only libmlx cannot make a GPU stream, and a Metal
// build picks its device through rlx_mlx_set_device.
char* rlx_mlx_set_device(int gpu) {
  try {
    mx::set_default_device(gpu ? mx::Device::gpu : mx::Device::cpu);
    return nullptr;
  } catch (const std::exception& e) {
    return error(e.what());
  }
}

char* rlx_mlx_from_bytes(int dt, const int64_t* shape, size_t ndim, const void* data, size_t len,
                         rlx_mlx_array** out) {
  try {
    mx::Shape s;
    for (size_t i = 0; i < ndim; i++) s.push_back(static_cast<int>(shape[i]));
    void* copy = std::malloc(len ? len : 1);
    if (!copy) return error("out of memory copying an input");
    if (len) std::memcpy(copy, data, len);
    *out = put(mx::array(copy, s, dtype(dt), [](void* p) { std::free(p); }));
    return nullptr;
  } catch (const std::exception& e) {
    return error(e.what());
  }
}

char* rlx_mlx_op(const char* name, rlx_mlx_array** ins, size_t n_in, const int64_t* ints, size_t n_ints,
                 const double* floats, size_t n_floats, int dt, rlx_mlx_array** out) {
  try {
    auto it = ops().find(name);
    if (it == ops().end()) return error(std::string("rlx-mlx shim has no op `") + name + "`");
    Args a;
    for (size_t i = 0; i < n_in; i++) a.in.push_back(*get(ins[i]));
    a.ints.assign(ints, ints + n_ints);
    a.floats.assign(floats, floats + n_floats);
    a.dt = dt;
    *out = put(it->second(a));
    return nullptr;
  } catch (const std::exception& e) {
    return error(std::string(name) + ": " + e.what());
  }
}

char* rlx_mlx_eval(rlx_mlx_array** arrs, size_t n) {
  try {
    std::vector<mx::array> v;
    for (size_t i = 0; i < n; i++) v.push_back(*get(arrs[i]));
    mx::eval(v);
    return nullptr;
  } catch (const std::exception& e) {
    return error(e.what());
  }
}

// Copies an evaluated array out row-major; `len` must be its byte size.
char* rlx_mlx_to_bytes(rlx_mlx_array* a, void* dst, size_t len) {
  try {
    mx::array c = mx::contiguous(*get(a));
    c.eval();
    if (c.nbytes() != len) {
      return error("output has " + std::to_string(c.nbytes()) + " bytes, the buffer " + std::to_string(len));
    }
    if (len) std::memcpy(dst, c.data<char>(), len);
    return nullptr;
  } catch (const std::exception& e) {
    return error(e.what());
  }
}

void rlx_mlx_free(rlx_mlx_array* a) { delete get(a); }

// mx::compile of a function the Rust side replays (traced once per input shapes, then run as
// one fused program). `user` must outlive the compiled function and names it in MLX's cache.
char* rlx_mlx_compile(rlx_mlx_fn fn, void* user, size_t n_out, rlx_mlx_compiled** out) {
  try {
    auto body = [fn, user, n_out](const std::vector<mx::array>& ins) {
      std::vector<rlx_mlx_array*> hs;
      for (auto& a : ins) hs.push_back(put(a));
      std::vector<rlx_mlx_array*> os(n_out, nullptr);
      int rc = fn(user, hs.data(), hs.size(), os.data(), n_out);
      for (auto h : hs) delete get(h);
      std::vector<mx::array> res;
      for (auto o : os) {
        if (o) {
          if (rc == 0) res.push_back(*get(o));
          delete get(o);
        }
      }
      if (rc != 0 || res.size() != n_out) throw std::runtime_error("the RLX program failed while MLX traced it");
      return res;
    };
    auto id = reinterpret_cast<std::uintptr_t>(user);
    *out = new rlx_mlx_compiled{mx::detail::compile(body, id), id, n_out};
    return nullptr;
  } catch (const std::exception& e) {
    return error(e.what());
  }
}

char* rlx_mlx_call(rlx_mlx_compiled* c, rlx_mlx_array* const* ins, size_t n_in, rlx_mlx_array** outs) {
  try {
    std::vector<mx::array> v;
    for (size_t i = 0; i < n_in; i++) v.push_back(*get(ins[i]));
    auto res = c->fun(v);
    for (size_t i = 0; i < c->n_out; i++) outs[i] = put(res.at(i));
    return nullptr;
  } catch (const std::exception& e) {
    return error(e.what());
  }
}

void rlx_mlx_free_compiled(rlx_mlx_compiled* c) {
  try {
    mx::detail::compile_erase(mx::detail::compile_cache(), c->id);
  } catch (...) {
  }
  delete c;
}

}  // extern "C"
