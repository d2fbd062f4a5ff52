// Latency measurements used by the libtorch backend to keep int8 from being
// slower than float: interleaved runs, medians.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "taoquant/backend.h"

namespace tq {
class ObserverTable;
struct Round;
class TimingCache;
}  // namespace tq

namespace tq::libtorch {

struct LatencyPair {
  int64_t batch_size = 0;
  double fp32_ms = 0, int8_ms = 0;
  // > 0: not measured; int8 was at most kInferRatio of fp32 at this smaller
  // batch, and fp32_ms is the estimate that made measuring too costly.
  int64_t inferred_from = 0;
  // > 0: not measured either; int8 was at most the check's ends ratio of fp32 at both
  // inferred_from and this larger batch, which stand for the sizes between.
  int64_t inferred_to = 0;
  // Other processes took the CPUs while it was measured, even after retries
  // (taoquant/latency.h): flagged in the report, and the run warns.
  bool contended = false;
};

// A larger batch is inferred, not measured, when int8 took at most this
// fraction of fp32's time at a smaller batch and one fp32 call at the larger
// batch would take more than kInferAboveMs.
constexpr double kInferRatio = 0.5;
constexpr double kInferAboveMs = 100;
// A win by 1.5x (int8 at most this fraction of fp32's time) measured at the
// smallest and at the largest size stands for the sizes between: a size
// between would have to run a third slower than both ends. The zoo's
// speed-ups (docs/benchmarks.md) are at most 6.3% below the lower end's
// between the ends.
constexpr double kBetweenRatio = 2.0 / 3.0;
// The never-slower check does not build the model without the layers
// slower alone when the layers left int8 save, timed alone, less than this
// share of the float model's time at a size where the planned model was
// measured: a model-level comparison that close is a coin toss between two
// runs of the same spec (docs/spec.md; ShuffleNetV2's one layer left:
// 156.13 against 155.00 ms in one run, all float in the next), and the
// published bytes would follow it.
constexpr double kMeasurableShare = 0.05;
// A layer timed alone: its first two timed pairs, each clean and 2x apart
// the same way, decide (AbLook::decide_apart), as one clean pair of a slow
// model does. On MobileNetV3-small at batch 1 on an AVX2 CPU, 42 of its 54
// layers alone run 2-13x slower in int8 (LibTorch 1.13's scalar
// quantize_per_tensor), and three more rounds of 5 ms each would not turn
// that around: 25 ms saved per layer.
constexpr double kLayerDecidesApart = 2.0;
// A single timed call of at least this length decides a 2x difference.
constexpr double kDecisiveMs = 10;
// A model that already ran at another batch size (its plan compiled there)
// pays at a new size only that size's one-time costs: oneDNN primitives for
// the new shapes, the first touch of larger buffers. Measured at batch 32
// after batch 1 (docs/benchmarks.md, scripts/bench/cold_calls.py), the cold
// float call was at most 19% above the fastest of the next three: ResNet-18
// and MobileNetV2 (1.1-1.3 s calls) 0.17-0.19 s, GoogLeNet (2.1 s) 0.17 s,
// ResNet-50 (3.6-3.9 s) -0.07 to 0.47 s, DenseNet-121 (3.1-3.5 s) -0.13 to
// 0.03 s, ViT-B/16 (about 17 s) 0. So where the cold float call takes at
// least kColdCallMs, a clean cold pair decides a clear difference (25%
// either way, as a look does): int8 could then be slower than the steady
// float call only if float's one-time costs took a third of its call.
constexpr double kColdCallMs = 1000;
bool cold_pair_decides(const Round& fp32, const Round& int8);

// The float model an int8 model is timed against, made on first use (a
// timing cache that holds every pair needs none).
using FloatModel = std::function<const torch::jit::Module&()>;

// Float model vs int8 model on `sample` resized to each batch size. First
// the smallest and the largest: when int8 takes at most `ends_ratio` of
// fp32's time at both, the sizes between are inferred (kBetweenRatio: the
// speed-up moves smoothly with the batch size; 1.0, any win, only where
// every int8 layer was timed alone at each size between and is not slower
// there). Else in ascending order up to the first where int8 is slower,
// then, with `crossover`, from the largest down to the next where it is
// slower (so a crossover is found both ways); the result is in ascending
// order. Each pair comes from `cache` under `key` when it holds it, else is
// measured and recorded there (`cache` may be null: measure, keep nothing).
// `ran` (may be null), in: these two modules already ran in this process
// (an earlier comparison measured them: the profiling executor compiled
// their plans there, and a new size pays only its own one-time costs); out:
// whether they have run by now.
std::vector<LatencyPair> compare_model_latency(
    const FloatModel& fp32, const torch::jit::Module& int8, const std::vector<at::Tensor>& sample,
    std::vector<int64_t> batch_sizes, TimingCache* cache, const std::string& key,
    double ends_ratio = kBetweenRatio, bool crossover = true, bool* ran = nullptr);

// The timing-cache key of the float model with `table`'s int8 layers: a
// hash of its graph and parameter shapes, the sample's shapes and what the
// float side is (the model frozen), and one of which layers are int8 at
// which granularity.
std::string model_timing_key(const QuantizeContext& ctx, ObserverTable& table,
                             const std::vector<at::Tensor>& sample);

// "16x14x14": the sizes from dimension `from` on (timing-cache keys).
std::string shape_text(const at::Tensor& t, int64_t from = 1);

// What timing each int8 layer alone found.
struct LayerTimings {
  // (layer, reason): int8 is slower for it at some batch size.
  std::vector<std::pair<std::string, std::string>> slower;
  // (layer, reason): it could not be timed alone (left to the model-level
  // check).
  std::vector<std::pair<std::string, std::string>> untimed;
  // Per batch size, what the layers int8 is not slower for save together,
  // each timed alone with its quantize and dequantize (fp32 - int8, ms);
  // empty when a size of one of them was inferred rather than measured.
  std::map<int64_t, double> kept_saving_ms;
};

// Each quantized layer alone: its float op vs quantize + int8 op + dequantize
// on its held-out input (`inputs`: capture_layer_inputs on `folded`;
// `input_observers`: ObservedLinears::layer_inputs), from
// ctx.timing_cache when it holds the layer's op and shapes, else measured
// and recorded there (a profiling cache also gets Linear's dynamic int8).
LayerTimings time_int8_layers(const QuantizeContext& ctx, const torch::jit::Module& folded,
                              const std::map<std::string, std::string>& input_observers,
                              ObserverTable& table, const std::map<std::string, at::Tensor>& inputs,
                              const std::vector<int64_t>& batch_sizes);

std::string format_ms(double ms);

}  // namespace tq::libtorch
