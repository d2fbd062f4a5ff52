// Accuracy, fidelity and latency statistics; the model's qengine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>

#include "eval_impl.h"
#include "taoquant/latency.h"
#include "taoquant/sqnr.h"

namespace tq::eval {

namespace {

struct EngineName {
  const char* name;
  at::QEngine engine;
};
constexpr EngineName kEngines[] = {{"fbgemm", at::QEngine::FBGEMM},
                                   {"qnnpack", at::QEngine::QNNPACK},
                                   {"onednn", at::QEngine::ONEDNN},
                                   {"x86", at::QEngine::X86}};

}  // namespace

std::string read_artifact_qengine(const std::string& path) {
  std::string text;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    const std::string rec = "extra/tao_quant_meta.json";
    if (!reader.hasRecord(rec)) return "";
    auto [data, size] = reader.getRecord(rec);
    text.assign(static_cast<const char*>(data.get()), size);
  } catch (const std::exception&) {
    return "";  // not an archive: load_model reports it properly
  }
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return "";
  for (const char* block : {"backend_meta", "backend"}) {
    if (!j.contains(block) || !j[block].is_object()) continue;
    const auto& b =
        std::string(block) == "backend" && j[block].contains("meta") ? j[block]["meta"] : j[block];
    for (const char* k : {"engine", "qengine"})
      if (b.is_object() && b.contains(k) && b[k].is_string()) return b[k].get<std::string>();
  }
  return "";
}

void set_qengine(const std::string& engine, const std::string& model_path) {
  std::string want = engine == "mkldnn" ? "onednn" : engine;
  const auto& supported = at::globalContext().supportedQEngines();
  std::string names;
  for (const auto& e : kEngines) {
    bool ok = std::find(supported.begin(), supported.end(), e.engine) != supported.end();
    if (ok) names += (names.empty() ? "" : ", ") + std::string(e.name);
    if (want == e.name) {
      if (!ok) break;
      at::globalContext().setQEngine(e.engine);
      return;
    }
  }
  throw RuntimeError("model '" + model_path + "' was quantized for the '" + engine +
                     "' quantized engine, which this LibTorch build does not support (supported: " +
                     (names.empty() ? "none" : names) + ")");
}

at::Tensor output_tensor(const c10::IValue& out, const std::string& model_path) {
  at::Tensor t;
  if (out.isTensor()) {
    t = out.toTensor();
  } else if (out.isTuple() && !out.toTupleRef().elements().empty()) {
    return output_tensor(out.toTupleRef().elements()[0], model_path);
  } else if (out.isList() && out.toListRef().size() > 0) {
    return output_tensor(out.toListRef()[0], model_path);
  } else if (out.isGenericDict() && out.toGenericDict().size() > 0) {
    return output_tensor(out.toGenericDict().begin()->value(), model_path);
  } else {
    throw RuntimeError(
        "model '" + model_path + "' returned a " + std::string(out.tagKind()) +
        " with no tensor; evaluate needs a tensor (or a tuple/list/dict whose first item is one)");
  }
  if (t.is_quantized()) t = t.dequantize();
  if (t.scalar_type() != at::kFloat) t = t.to(at::kFloat);
  return t;
}

void AccuracyMeter::add(const at::Tensor& logits, const at::Tensor& labels) {
  const int64_t n = logits.size(0);
  correct1 += static_cast<size_t>(logits.argmax(1).eq(labels).sum().item<int64_t>());
  if (top5) {
    at::Tensor idx = std::get<1>(logits.topk(5, 1));
    correct5 += static_cast<size_t>(idx.eq(labels.unsqueeze(1)).any(1).sum().item<int64_t>());
  }
  count += static_cast<size_t>(n);
}

void FidelityMeter::add(const at::Tensor& ref, const at::Tensor& got) {
  const int64_t n = ref.size(0);
  at::Tensor f = ref.reshape({n, -1}).to(at::kDouble);
  at::Tensor q = got.reshape({n, -1}).to(at::kDouble);
  at::Tensor diff = f - q;
  at::Tensor nf = f.norm(2, 1), nq = q.norm(2, 1);
  at::Tensor dot = (f * q).sum(1);
  // Both zero: identical (1). One zero: no similarity (0).
  at::Tensor denom = nf * nq;
  at::Tensor cos =
      at::where(denom > 0, dot / denom.clamp_min(std::numeric_limits<double>::min()),
                at::where((nf == 0).logical_and(nq == 0), at::ones_like(dot), at::zeros_like(dot)));
  cos_sum_ += cos.sum().item<double>();
  signal_ += f.pow(2).sum().item<double>();
  noise_ += diff.pow(2).sum().item<double>();
  at::Tensor a = diff.abs();
  abs_sum_ += a.sum().item<double>();
  if (a.numel() > 0) max_abs_ = std::max(max_abs_, a.max().item<double>());
  if (f.size(1) > 0)
    agree_ += static_cast<size_t>(f.argmax(1).eq(q.argmax(1)).sum().item<int64_t>());
  samples_ += static_cast<size_t>(n);
  elements_ += static_cast<size_t>(f.numel());
}

Fidelity FidelityMeter::result() const {
  Fidelity r;
  if (samples_ == 0) return r;
  r.cosine = cos_sum_ / static_cast<double>(samples_);
  SqnrEnergy e;
  e.add_sums(signal_, noise_);
  r.sqnr_db = e.db();
  r.max_abs_error = max_abs_;
  r.mean_abs_error = elements_ ? abs_sum_ / static_cast<double>(elements_) : 0;
  r.top1_agreement = 100.0 * static_cast<double>(agree_) / static_cast<double>(samples_);
  return r;
}

LatencyStats summarize_latency(std::vector<double> s, int batch_size) {
  LatencyStats st;
  st.batch_size = batch_size;
  st.iters = static_cast<int>(s.size());
  if (s.empty()) return st;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  const double median = tq::median(s);
  const size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n)));  // nearest rank
  st.median_ms = median * 1e3;
  st.p90_ms = s[std::max<size_t>(rank, 1) - 1] * 1e3;
  st.mean_ms = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(n) * 1e3;
  st.min_ms = s.front() * 1e3;
  st.throughput = median > 0 ? batch_size / median : 0;
  return st;
}

void measure_latency(std::vector<LoadedModel*>& models, const std::vector<at::Tensor>& first_batch,
                     const LatencySpec& spec,
                     const std::function<void(const std::string&, size_t, size_t)>& progress) {
  const size_t rounds = static_cast<size_t>(spec.warmup + spec.iters);
  size_t base = 0;
  const size_t total = spec.batch_sizes.size() * rounds;
  for (int bs : spec.batch_sizes) {
    std::vector<c10::IValue> args;
    for (const auto& t : first_batch) args.emplace_back(resize_batch(t, bs));
    std::vector<std::function<void()>> calls;
    for (auto* lm : models)
      calls.push_back([&args, lm, bs] {
        try {
          lm->module.forward(args);
        } catch (const c10::Error& e) {
          throw RuntimeError("latency at batch size " + std::to_string(bs) + ": model '" +
                             lm->result->path +
                             "' failed: " + first_line(e.what_without_backtrace()));
        }
      });
    auto times = interleaved_times(calls, spec.warmup, spec.iters, [&](size_t done, size_t) {
      if (progress) progress("latency", base + done, total);
    });
    base += rounds;
    for (size_t k = 0; k < models.size(); ++k) {
      LatencyStats st = summarize_latency(times.seconds[k], bs);
      st.contended = times.contended;
      st.rounds_dropped = times.dropped;
      models[k]->result->latency.push_back(st);
    }
  }
}

}  // namespace tq::eval
