// The image-folder loader: JPEG/PNG/BMP files, flat or one sub-folder per
// class, decoded with OpenCV on a small thread pool that works a few batches
// ahead of the consumer (never the whole folder in memory).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>
#include <torch/script.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/messages.h"
#include "data_impl.h"

namespace tq::data {

namespace {

namespace fs = std::filesystem;

constexpr const char* kImageExts = ".jpg, .jpeg, .png, .bmp";

bool is_image(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return std::tolower(c); });
  return e == ".jpg" || e == ".jpeg" || e == ".png" || e == ".bmp";
}

bool hidden(const fs::path& p) {
  const std::string n = p.filename().string();
  return !n.empty() && n[0] == '.';
}

struct Sample {
  std::string path;
  int64_t label = -1;
};

// Python's round(): halves to even (torchvision's center crop uses it).
int round_half_even(double v) {
  return static_cast<int>(std::nearbyint(v));
}

class ImageFolderLoader : public DataLoader {
 public:
  ImageFolderLoader(const Spec& spec, const DataSourceSpec& src, const std::string& key,
                    bool want_labels)
      : src_(src), pre_(src.preprocess), want_labels_(want_labels) {
    require_path(spec, key + ".images_dir", src.images_dir, true);
    check_preprocess(spec, key);
    discover();
    plan_ = plan_batches(static_cast<int64_t>(samples_.size()), src.batch_size, src.max_batches);
    if (src.shuffle) {
      order_ = seeded_permutation(plan_.total, src.seed);
    } else {
      order_.resize(static_cast<size_t>(plan_.total));
      for (int64_t i = 0; i < plan_.total; ++i) order_[static_cast<size_t>(i)] = i;
    }
    order_.resize(static_cast<size_t>(plan_.num_samples));
    workers_ = std::max(1, src.num_workers);
    chunks_ = static_cast<int64_t>(std::min<int64_t>(workers_, plan_.batch_size));
    build_luts();
    // The first image fixes the size every other image must have.
    cv::Mat first = load(samples_[static_cast<size_t>(order_[0])].path);
    ref_path_ = samples_[static_cast<size_t>(order_[0])].path;
    ref_c_ = first.channels();
    ref_h_ = first.rows;
    ref_w_ = first.cols;
  }
  ~ImageFolderLoader() override { stop(); }

  bool next(Batch& out) override {
    if (consumed_ >= plan_.num_batches) return false;
    if (threads_.empty()) start();
    Pending p;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        auto it = pending_.find(consumed_);
        return it != pending_.end() && it->second.remaining == 0;
      });
      p = std::move(pending_[consumed_]);
      pending_.erase(consumed_);
      ++consumed_;
    }
    cv_.notify_all();
    for (auto& e : p.errors)
      if (e) std::rethrow_exception(e);
    const int64_t b = consumed_ - 1;
    const int64_t start = b * plan_.batch_size;
    const int64_t count = std::min(plan_.batch_size, plan_.num_samples - start);
    std::vector<at::Tensor> parts;
    for (auto& t : p.chunks)
      if (t.defined()) parts.push_back(t);
    out.inputs = {parts.size() == 1 ? parts[0] : at::cat(parts, 0)};
    out.first_index = static_cast<size_t>(start);
    if (has_labels()) {
      out.labels = at::empty({count}, at::kLong);
      auto* l = out.labels.data_ptr<int64_t>();
      for (int64_t i = 0; i < count; ++i)
        l[i] = samples_[static_cast<size_t>(order_[start + i])].label;
    } else {
      out.labels = at::Tensor();
    }
    return true;
  }

  void reset() override {
    stop();
    consumed_ = 0;
  }
  size_t num_samples() const override { return static_cast<size_t>(plan_.num_samples); }
  size_t num_batches() const override { return static_cast<size_t>(plan_.num_batches); }
  bool has_labels() const override { return want_labels_ && !class_names_.empty(); }
  std::vector<std::string> class_names() const override { return class_names_; }
  std::string sample_name(size_t position) const override {
    if (position >= order_.size()) return DataLoader::sample_name(position);
    return "image '" + samples_[static_cast<size_t>(order_[position])].path + "'";
  }
  std::string describe() const override {
    std::string s =
        "images " + src_.images_dir + " (" + std::to_string(plan_.num_samples) + " samples";
    if (plan_.num_samples < plan_.total) s += " of " + std::to_string(plan_.total);
    if (!class_names_.empty()) s += " in " + std::to_string(class_names_.size()) + " classes";
    s +=
        ", " + std::to_string(ref_c_) + "x" + std::to_string(ref_h_) + "x" + std::to_string(ref_w_);
    return s + ", batch " + std::to_string(plan_.batch_size) + (src_.shuffle ? ", shuffled" : "") +
           ")";
  }

 private:
  struct Pending {
    std::vector<at::Tensor> chunks;
    std::vector<std::exception_ptr> errors;
    int64_t remaining = 0;
  };

  void check_preprocess(const Spec& spec, const std::string& key) {
    const int channels = pre_.color == "gray" ? 1 : 3;
    for (const auto* v : {&pre_.mean, &pre_.std}) {
      const char* name = v == &pre_.mean ? "mean" : "std";
      if (v->size() > 1 && static_cast<int>(v->size()) != channels) {
        const std::string k = key + ".preprocess." + name;
        throw SpecError(spec.loc(k), k + ": has " + std::to_string(v->size()) +
                                         " values but color '" + pre_.color + "' images have " +
                                         std::to_string(channels) + " channel" +
                                         (channels == 1 ? "" : "s"));
      }
    }
    if (pre_.center_crop && pre_.input_size.empty()) {
      const std::string k = key + ".preprocess.center_crop";
      throw SpecError(spec.loc(k), k + ": center_crop needs preprocess.input_size (the crop size)");
    }
  }

  // An image's path; a FIFO or a device named like an image is refused (a
  // decoder would block on it, or read without end).
  static std::string regular_image(const fs::path& p) {
    const std::string problem = file_problem(p.string());
    if (!problem.empty()) throw RuntimeError("image " + quote_value(p.string()) + " " + problem);
    return p.string();
  }

  // Class c's images: every image under its folder, hidden entries skipped.
  void add_class(const fs::path& root, size_t c) {
    const fs::path dir = root / class_names_[c];
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw RuntimeError("class '" + class_names_[c] + "' (classes[" + std::to_string(c) +
                         "]) has no folder '" + dir.string() + "'");
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
         ++it) {
      if (hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_directory() && is_image(it->path())) files.push_back(regular_image(it->path()));
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) spdlog::warn("class folder '{}' has no images", dir.string());
    for (auto& f : files) samples_.push_back({f, static_cast<int64_t>(c)});
  }

  void discover() {
    const fs::path root(src_.images_dir);
    std::vector<std::string> dirs;
    std::vector<std::string> root_images;
    std::string other_example;
    size_t others = 0, entries = 0;
    for (const auto& e : fs::directory_iterator(root)) {
      if (hidden(e.path())) continue;
      ++entries;
      if (e.is_directory())
        dirs.push_back(e.path().filename().string());
      else if (is_image(e.path()))
        root_images.push_back(regular_image(e.path()));
      else if (others++ == 0)
        other_example = e.path().filename().string();
    }
    if (entries == 0) throw RuntimeError("images_dir '" + src_.images_dir + "' is empty");
    std::sort(dirs.begin(), dirs.end());
    std::sort(root_images.begin(), root_images.end());
    if (dirs.empty() && src_.classes.empty()) {
      for (auto& p : root_images) samples_.push_back({p, -1});
      if (samples_.empty())
        throw RuntimeError("no images (" + std::string(kImageExts) + ") found in '" +
                           src_.images_dir + "' (" + std::to_string(others) + " other file" +
                           (others == 1 ? "" : "s") + ", e.g. '" + other_example + "')");
      return;
    }
    // One sub-folder per class.
    class_names_ = src_.classes.empty() ? dirs : src_.classes;
    for (const auto& d : dirs)
      if (std::find(class_names_.begin(), class_names_.end(), d) == class_names_.end())
        throw RuntimeError("folder '" + (root / d).string() + "' is not in the classes list (" +
                           std::to_string(class_names_.size()) + " classes" +
                           did_you_mean(d, class_names_) +
                           "); add it to classes: or move it out of images_dir");
    if (!root_images.empty())
      spdlog::warn("{}: {} image(s) directly in the folder ignored (class sub-folders are used)",
                   src_.images_dir, root_images.size());
    for (size_t c = 0; c < class_names_.size(); ++c) add_class(root, c);
    if (samples_.empty())
      throw RuntimeError("no images (" + std::string(kImageExts) +
                         ") found in the class folders of '" + src_.images_dir + "'");
  }

  // scale, mean and std folded into one table per channel (pixels are 8-bit).
  void build_luts() {
    const int channels = pre_.color == "gray" ? 1 : 3;
    luts_.assign(static_cast<size_t>(channels), std::vector<float>(256));
    for (int c = 0; c < channels; ++c) {
      double m =
          pre_.mean.empty() ? 0.0 : pre_.mean[pre_.mean.size() == 1 ? 0 : static_cast<size_t>(c)];
      double s =
          pre_.std.empty() ? 1.0 : pre_.std[pre_.std.size() == 1 ? 0 : static_cast<size_t>(c)];
      for (int v = 0; v < 256; ++v)
        luts_[static_cast<size_t>(c)][static_cast<size_t>(v)] =
            static_cast<float>((v * pre_.scale - m) / s);
    }
  }

  // Decode + color + geometry; an 8-bit HxWxC image.
  cv::Mat load(const std::string& path) const {
    const bool gray = pre_.color == "gray";
    cv::Mat img;
    try {
      img = cv::imread(path, gray ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
    } catch (const cv::Exception& e) {
      throw RuntimeError("cannot decode image '" + path + "': " + e.what());
    }
    if (img.empty())
      throw RuntimeError("cannot decode image '" + path + "' (unreadable, corrupt or truncated)");
    if (pre_.color == "rgb") cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
    if (pre_.resize > 0) {
      const int h = img.rows, w = img.cols, s = pre_.resize;
      int nh = h, nw = w;
      if (h <= w) {
        nh = s;
        nw = static_cast<int>(static_cast<double>(s) * w / h);
      } else {
        nw = s;
        nh = static_cast<int>(static_cast<double>(s) * h / w);
      }
      resize_to(img, nh, nw);
    }
    if (pre_.center_crop) {
      const int th = pre_.input_size[0], tw = pre_.input_size[1];
      if (img.rows < th || img.cols < tw) {  // pad with zeros, as torchvision does
        const int ph = std::max(0, th - img.rows), pw = std::max(0, tw - img.cols);
        cv::copyMakeBorder(img, img, ph / 2, (ph + 1) / 2, pw / 2, (pw + 1) / 2,
                           cv::BORDER_CONSTANT, 0);
      }
      const int top = round_half_even((img.rows - th) / 2.0);
      const int left = round_half_even((img.cols - tw) / 2.0);
      img = img(cv::Rect(left, top, tw, th)).clone();
    }
    if (!pre_.input_size.empty()) resize_to(img, pre_.input_size[0], pre_.input_size[1]);
    return img;
  }

  static void resize_to(cv::Mat& img, int h, int w) {
    if (img.rows == h && img.cols == w) return;
    const bool shrink = h < img.rows && w < img.cols;
    cv::resize(img, img, cv::Size(w, h), 0, 0, shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
  }

  // Decodes samples order_[begin..end) into a [n, C, H, W] float tensor.
  at::Tensor decode_range(int64_t begin, int64_t end) const {
    at::Tensor out = at::empty({end - begin, ref_c_, ref_h_, ref_w_}, at::kFloat);
    float* dst = out.data_ptr<float>();
    const size_t plane = static_cast<size_t>(ref_h_) * static_cast<size_t>(ref_w_);
    for (int64_t i = begin; i < end; ++i) {
      const std::string& path = samples_[static_cast<size_t>(order_[static_cast<size_t>(i)])].path;
      cv::Mat img = load(path);
      if (img.channels() != ref_c_ || img.rows != ref_h_ || img.cols != ref_w_)
        throw RuntimeError("inconsistent image sizes after preprocessing: '" + path + "' is " +
                           std::to_string(img.channels()) + "x" + std::to_string(img.rows) + "x" +
                           std::to_string(img.cols) + " but '" + ref_path_ + "' is " +
                           std::to_string(ref_c_) + "x" + std::to_string(ref_h_) + "x" +
                           std::to_string(ref_w_) +
                           " (CxHxW); set preprocess.input_size to bring all images to one size");
      float* base = dst + static_cast<size_t>(i - begin) * plane * static_cast<size_t>(ref_c_);
      for (int y = 0; y < ref_h_; ++y) {
        const uint8_t* row = img.ptr<uint8_t>(y);
        for (int x = 0; x < ref_w_; ++x)
          for (int c = 0; c < ref_c_; ++c)
            base[static_cast<size_t>(c) * plane + static_cast<size_t>(y) * ref_w_ + x] =
                luts_[static_cast<size_t>(c)][row[x * ref_c_ + c]];
      }
    }
    return out;
  }

  void start() {
    next_unit_ = consumed_ * chunks_;
    stopping_ = false;
    for (int i = 0; i < workers_; ++i) threads_.emplace_back([this] { work(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    pending_.clear();
  }

  void work() {
    const int64_t total_units = plan_.num_batches * chunks_;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] {
        return stopping_ || next_unit_ >= total_units || next_unit_ / chunks_ < consumed_ + kAhead;
      });
      if (stopping_ || next_unit_ >= total_units) return;
      const int64_t u = next_unit_++;
      const int64_t b = u / chunks_, c = u % chunks_;
      auto it = pending_.find(b);
      if (it == pending_.end()) {
        Pending p;
        p.chunks.resize(static_cast<size_t>(chunks_));
        p.errors.resize(static_cast<size_t>(chunks_));
        p.remaining = chunks_;
        pending_.emplace(b, std::move(p));
      }
      lk.unlock();
      const int64_t bstart = b * plan_.batch_size;
      const int64_t bcount = std::min(plan_.batch_size, plan_.num_samples - bstart);
      const int64_t per = (bcount + chunks_ - 1) / chunks_;
      const int64_t begin = std::min(bcount, c * per), end = std::min(bcount, begin + per);
      at::Tensor t;
      std::exception_ptr err;
      try {
        if (end > begin) t = decode_range(bstart + begin, bstart + end);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      Pending& p = pending_[b];
      p.chunks[static_cast<size_t>(c)] = std::move(t);
      p.errors[static_cast<size_t>(c)] = err;
      if (--p.remaining == 0) cv_.notify_all();
    }
  }

  static constexpr int64_t kAhead = 3;  // batches decoded ahead of the consumer

  DataSourceSpec src_;
  PreprocessSpec pre_;
  bool want_labels_;
  std::vector<Sample> samples_;
  std::vector<std::string> class_names_;
  BatchPlan plan_;
  std::vector<int64_t> order_;
  std::vector<std::vector<float>> luts_;
  std::string ref_path_;
  int ref_c_ = 0, ref_h_ = 0, ref_w_ = 0;
  int workers_ = 1;
  int64_t chunks_ = 1;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::thread> threads_;
  std::map<int64_t, Pending> pending_;
  int64_t next_unit_ = 0;
  int64_t consumed_ = 0;
  bool stopping_ = false;
};

}  // namespace

std::unique_ptr<DataLoader> make_image_loader(const Spec& spec, const DataSourceSpec& src,
                                              const std::string& key, bool want_labels) {
  return std::make_unique<ImageFolderLoader>(spec, src, key, want_labels);
}

}  // namespace tq::data
