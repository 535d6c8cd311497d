// What the RoI kernels share: argument checks, RoIAlign's bilinear sampling rule and RoIPool's bins.
// Internal to custom_kernels/; users include torchvision_kernels.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace lightweight_dispatch::custom::detail {

// torchvision returns roi_pool's argmax and the ps ops' channel mapping as int32, not int64.
constexpr c10::ScalarType kIndexDtype = c10::kInt;
using index_t = int32_t;

struct RoiShapes {
  int64_t batch;
  int64_t channels;
  int64_t height;
  int64_t width;
  int64_t num_rois;
};

inline void check_floating_cpu(const char* op, const char* name, const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), op, ": ", name, " is an undefined tensor");
  TORCH_CHECK(tensor.device().is_cpu(), op, ": ", name, " must be a CPU tensor, got ", tensor.device());
  TORCH_CHECK(tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kDouble, op, ": ", name,
              " must be float32 or float64, got ", tensor.scalar_type());
}

inline void check_same_dtype(const char* op, const char* name, const at::Tensor& tensor, const char* other_name,
                             const at::Tensor& other) {
  TORCH_CHECK(tensor.scalar_type() == other.scalar_type(), op, ": ", name, " (", tensor.scalar_type(),
              ") and ", other_name, " (", other.scalar_type(), ") must have the same dtype");
}

// Checks what every RoI op needs (input [N, C, H, W], rois [K, 5], one floating dtype, positive pooled
// sizes) and returns the shapes.
inline RoiShapes check_roi_args(const char* op, const at::Tensor& input, const at::Tensor& rois,
                                int64_t pooled_height, int64_t pooled_width) {
  check_floating_cpu(op, "input", input);
  check_floating_cpu(op, "rois", rois);
  TORCH_CHECK(input.dim() == 4, op, ": input must be a 4-D tensor [N, C, H, W], got shape ", input.sizes());
  TORCH_CHECK(rois.dim() == 2 && rois.size(1) == 5, op,
              ": rois must have shape [K, 5] (batch_index, x1, y1, x2, y2), got ", rois.sizes());
  check_same_dtype(op, "input", input, "rois", rois);
  TORCH_CHECK(input.size(2) > 0 && input.size(3) > 0, op, ": input has an empty feature map, shape ",
              input.sizes());
  TORCH_CHECK(pooled_height > 0 && pooled_width > 0, op, ": pooled_height and pooled_width must be positive, got ",
              pooled_height, " and ", pooled_width);
  return {input.size(0), input.size(1), input.size(2), input.size(3), rois.size(0)};
}

// torchvision truncates the first roi column to an int and reads that image without checking; we check, so a
// bad roi is an error rather than an out-of-bounds read.
template <typename T>
int64_t roi_batch_index(const char* op, const T* roi, int64_t roi_index, int64_t batch) {
  const T value = roi[0];
  TORCH_CHECK(value > T(-1) && value < static_cast<T>(batch), op, ": rois[", roi_index, ", 0] = ", value,
              " is not a batch index of input (batch size ", batch, ")");
  return static_cast<int64_t>(value);
}

// One bilinear sample of an H x W map: four positions and their weights.
template <typename T>
struct BilinearTap {
  int64_t pos[4] = {0, 0, 0, 0};
  T weight[4] = {0, 0, 0, 0};

  T apply(const T* map) const {
    return weight[0] * map[pos[0]] + weight[1] * map[pos[1]] + weight[2] * map[pos[2]] + weight[3] * map[pos[3]];
  }
};

// torchvision's RoIAlign border rule: a point more than one pixel outside the map (or NaN) samples 0; a point
// within that margin is clamped onto the map's edge, so edge pixels are repeated rather than zero-padded.
template <typename T>
BilinearTap<T> roi_bilinear_tap(int64_t height, int64_t width, T y, T x) {
  BilinearTap<T> tap;
  if (!(y >= T(-1) && y <= static_cast<T>(height) && x >= T(-1) && x <= static_cast<T>(width))) {
    return tap;
  }
  y = std::max(y, T(0));
  x = std::max(x, T(0));
  int64_t y_low = static_cast<int64_t>(y);
  int64_t x_low = static_cast<int64_t>(x);
  int64_t y_high = y_low + 1;
  int64_t x_high = x_low + 1;
  if (y_low >= height - 1) {
    y_low = y_high = height - 1;
    y = static_cast<T>(y_low);
  }
  if (x_low >= width - 1) {
    x_low = x_high = width - 1;
    x = static_cast<T>(x_low);
  }
  const T ly = y - static_cast<T>(y_low);
  const T lx = x - static_cast<T>(x_low);
  const T hy = T(1) - ly;
  const T hx = T(1) - lx;
  tap.pos[0] = y_low * width + x_low;
  tap.pos[1] = y_low * width + x_high;
  tap.pos[2] = y_high * width + x_low;
  tap.pos[3] = y_high * width + x_high;
  tap.weight[0] = hy * hx;
  tap.weight[1] = hy * lx;
  tap.weight[2] = ly * hx;
  tap.weight[3] = ly * lx;
  return tap;
}

// RoIAlign's samples per bin along one axis: `sampling_ratio` if positive, else ceil(roi size / bins).
// May be zero or negative for an empty or inverted roi, in which case no sample is taken.
template <typename T>
int64_t samples_per_bin(int64_t sampling_ratio, T roi_size, int64_t pooled) {
  return sampling_ratio > 0 ? sampling_ratio : static_cast<int64_t>(std::ceil(roi_size / static_cast<T>(pooled)));
}

// RoIPool's [start, end) of bin `i`, of size `bin_size`, in an integer roi starting at pixel `origin`, clipped
// to [0, limit]. Rounding outwards (floor, ceil) makes neighbouring bins overlap rather than leave gaps.
template <typename T>
std::pair<int64_t, int64_t> quantised_bin(int64_t i, T bin_size, int64_t origin, int64_t limit) {
  const int64_t start = static_cast<int64_t>(std::floor(static_cast<T>(i) * bin_size)) + origin;
  const int64_t end = static_cast<int64_t>(std::ceil(static_cast<T>(i + 1) * bin_size)) + origin;
  return {std::clamp<int64_t>(start, 0, limit), std::clamp<int64_t>(end, 0, limit)};
}

} // namespace lightweight_dispatch::custom::detail
