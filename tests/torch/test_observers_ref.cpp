// minmax and moving_average_minmax against PyTorch's observers, bit for bit,
// on the reference data from scripts/ref/make_observer_refs.py.
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <torch/torch.h>
#include <catch2/catch.hpp>
#include "taoquant/json.h"

#include "taoquant/observer.h"

namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

nlohmann::json load_refs() {
  std::string path = std::string(TQ_SOURCE_DIR) + "/tests/data/observer_refs.json";
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

at::Tensor tensor_from(const nlohmann::json& batch) {
  std::vector<int64_t> shape = batch.at("shape").get<std::vector<int64_t>>();
  std::vector<uint32_t> raw = batch.at("bits").get<std::vector<uint32_t>>();
  std::vector<float> vals(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) vals[i] = float_of(raw[i]);
  return torch::from_blob(vals.data(), shape, torch::kFloat).clone();
}

std::string label(const nlohmann::json& c) {
  std::ostringstream os;
  os << c.at("observer").get<std::string>() << " " << c.at("tensor").get<std::string>() << " "
     << c.at("dtype").get<std::string>()
     << (c.at("symmetric").get<bool>() ? " symmetric" : " affine")
     << (c.at("per_channel").get<bool>()
             ? " per-channel axis " + std::to_string(c.at("axis").get<int>())
             : " per-tensor")
     << (c.at("reduce_range").get<bool>() ? " reduce_range" : "");
  if (c.contains("averaging_constant")) os << " c=" << c.at("averaging_constant").get<double>();
  return os.str();
}

}  // namespace

TEST_CASE("observers: minmax and moving average qparams are bit-identical to PyTorch",
          "[observers][observers_ref]") {
  nlohmann::json refs = load_refs();
  REQUIRE(refs.at("eps").get<uint32_t>() == bits_of(std::numeric_limits<float>::epsilon()));
  std::map<std::string, std::vector<at::Tensor>> tensors;
  for (auto& [name, entry] : refs.at("tensors").items())
    for (const auto& b : entry.at("batches")) tensors[name].push_back(tensor_from(b));
  const auto& cases = refs.at("cases");
  REQUIRE(cases.size() >= 200);

  int checked = 0, per_channel_values = 0;
  std::vector<std::string> failures;
  for (const auto& c : cases) {
    tq::ObserverConfig cfg;
    cfg.dtype = c.at("dtype") == "uint8" ? tq::DType::kUInt8 : tq::DType::kInt8;
    cfg.symmetric = c.at("symmetric").get<bool>();
    cfg.per_channel = c.at("per_channel").get<bool>();
    cfg.axis = c.at("axis").get<int>();
    cfg.reduce_range = c.at("reduce_range").get<bool>();
    if (c.contains("averaging_constant"))
      cfg.kwargs["averaging_constant"] = c.at("averaging_constant").get<double>();
    auto obs = tq::ObserverRegistry::instance().create(c.at("observer").get<std::string>(), cfg);
    for (const auto& t : tensors.at(c.at("tensor").get<std::string>())) obs->observe(t);
    tq::QParams q = obs->finalize();

    auto want_scale = c.at("scale").get<std::vector<uint32_t>>();
    auto want_zp = c.at("zero_point").get<std::vector<int32_t>>();
    auto want_min = c.at("min_val").get<std::vector<uint32_t>>();
    auto want_max = c.at("max_val").get<std::vector<uint32_t>>();
    std::ostringstream err;
    if (q.scale.size() != want_scale.size() || q.zero_point.size() != want_zp.size()) {
      err << "size " << q.scale.size() << " vs " << want_scale.size();
    } else {
      for (size_t i = 0; i < want_scale.size(); ++i) {
        if (bits_of(q.scale[i]) != want_scale[i])
          err << " scale[" << i << "] " << std::hexfloat << q.scale[i]
              << " != " << float_of(want_scale[i]) << std::defaultfloat;
        if (q.zero_point[i] != want_zp[i])
          err << " zero_point[" << i << "] " << q.zero_point[i] << " != " << want_zp[i];
      }
    }
    // QParams carries the range over all channels.
    float wmin = std::numeric_limits<float>::infinity(), wmax = -wmin;
    for (auto u : want_min) wmin = std::min(wmin, float_of(u));
    for (auto u : want_max) wmax = std::max(wmax, float_of(u));
    if (bits_of(float(q.min_val)) != bits_of(wmin) || bits_of(float(q.max_val)) != bits_of(wmax))
      err << " range [" << q.min_val << ", " << q.max_val << "] != [" << wmin << ", " << wmax
          << "]";
    if (q.per_channel != cfg.per_channel) err << " per_channel flag";
    if (!err.str().empty()) failures.push_back(label(c) + ":" + err.str());
    ++checked;
    if (cfg.per_channel) per_channel_values += int(want_scale.size());
  }
  for (size_t i = 0; i < std::min<size_t>(failures.size(), 10); ++i) UNSCOPED_INFO(failures[i]);
  CHECK(failures.empty());
  CHECK(checked == int(cases.size()));
  CHECK(per_channel_values > 1000);  // the 256-range tensor is in there
}

TEST_CASE("observers: qparams_from_range follows PyTorch's edge cases", "[observers]") {
  tq::ObserverConfig cfg;
  cfg.dtype = tq::DType::kUInt8;
  // Never observed (PyTorch's +inf/-inf initial buffers): scale 1, zero point 0.
  float inf = std::numeric_limits<float>::infinity();
  auto q = tq::qparams_from_range({inf}, {-inf}, cfg);
  CHECK(q.scale == std::vector<float>{1.0f});
  CHECK(q.zero_point == std::vector<int32_t>{0});
  // A zero range: the scale is clamped to float32 eps; 0 maps to the zero point.
  q = tq::qparams_from_range({0.0f}, {0.0f}, cfg);
  CHECK(q.scale[0] == std::numeric_limits<float>::epsilon());
  CHECK(q.zero_point[0] == 0);
  // All positive: the range is widened to include 0.
  q = tq::qparams_from_range({2.0f}, {5.1f}, cfg);
  CHECK(q.scale[0] == 5.1f / 255.0f);
  CHECK(q.zero_point[0] == 0);
  // All negative affine uint8: zero point at the top.
  q = tq::qparams_from_range({-5.1f}, {-2.0f}, cfg);
  CHECK(q.zero_point[0] == 255);
  // Symmetric quint8: zero point 128; qint8: 0; int4: 0 over [-8, 7].
  cfg.symmetric = true;
  q = tq::qparams_from_range({-1.0f}, {3.0f}, cfg);
  CHECK(q.zero_point[0] == 128);
  CHECK(q.scale[0] == 3.0f / 127.5f);
  cfg.dtype = tq::DType::kInt8;
  q = tq::qparams_from_range({-1.0f}, {3.0f}, cfg);
  CHECK(q.zero_point[0] == 0);
  CHECK(q.quant_min == -128);
  CHECK(q.quant_max == 127);
  cfg.dtype = tq::DType::kInt4;
  q = tq::qparams_from_range({-1.0f}, {3.0f}, cfg);
  CHECK(q.quant_min == -8);
  CHECK(q.quant_max == 7);
  CHECK(q.scale[0] == 3.0f / 7.5f);
  // Reduced ranges.
  int lo = 0, hi = 0;
  tq::quant_range(tq::DType::kUInt8, true, lo, hi);
  CHECK((lo == 0 && hi == 127));
  tq::quant_range(tq::DType::kInt8, true, lo, hi);
  CHECK((lo == -64 && hi == 63));
  CHECK_THROWS_AS(tq::quant_range(tq::DType::kNative, false, lo, hi), tq::UsageError);
  // min > max is refused, naming the channel.
  cfg.per_channel = true;
  CHECK_THROWS_WITH(tq::qparams_from_range({0.0f, 2.0f}, {1.0f, 1.0f}, cfg),
                    Catch::Contains("channel 1"));
  CHECK_THROWS_AS(tq::qparams_from_range({0.0f}, {1.0f, 2.0f}, cfg), tq::RuntimeError);
}
