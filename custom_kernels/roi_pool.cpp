// torchvision::roi_pool: max pooling over quantised bins (Fast R-CNN's RoIPool) on the CPU.
#include <custom_kernels/roi_common.h>
#include <lightweight_dispatch/torchvision_kernels.h>

#include <ATen/Dispatch.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace lightweight_dispatch::custom {

namespace {

constexpr const char* kOp = "torchvision::roi_pool";

struct Shape {
  int64_t channels, height, width, pooled_height, pooled_width;
};

template <typename T>
void roi_pool_one(const T* image, const T* roi, T scale, const Shape& s, T* out, detail::index_t* argmax) {
  // Corners are rounded half away from zero (std::round), and the roi covers both corner pixels.
  const int64_t start_w = static_cast<int64_t>(std::round(roi[1] * scale));
  const int64_t start_h = static_cast<int64_t>(std::round(roi[2] * scale));
  const int64_t end_w = static_cast<int64_t>(std::round(roi[3] * scale));
  const int64_t end_h = static_cast<int64_t>(std::round(roi[4] * scale));
  const int64_t roi_width = std::max<int64_t>(end_w - start_w + 1, 1);
  const int64_t roi_height = std::max<int64_t>(end_h - start_h + 1, 1);
  const T bin_h = static_cast<T>(roi_height) / static_cast<T>(s.pooled_height);
  const T bin_w = static_cast<T>(roi_width) / static_cast<T>(s.pooled_width);

  const int64_t bins = s.pooled_height * s.pooled_width;
  for (int64_t ph = 0; ph < s.pooled_height; ++ph) {
    const auto [h0, h1] = detail::quantised_bin(ph, bin_h, start_h, s.height);
    for (int64_t pw = 0; pw < s.pooled_width; ++pw) {
      const auto [w0, w1] = detail::quantised_bin(pw, bin_w, start_w, s.width);
      const bool empty = h1 <= h0 || w1 <= w0;
      for (int64_t c = 0; c < s.channels; ++c) {
        const T* map = image + c * s.height * s.width;
        // As torchvision: an empty bin is 0 with argmax -1; otherwise the first maximum in row-major order
        // wins, starting from -FLT_MAX (so a bin of NaNs also reports -1).
        T best = empty ? T(0) : static_cast<T>(-FLT_MAX);
        int64_t best_index = -1;
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t w = w0; w < w1; ++w) {
            const int64_t index = h * s.width + w;
            if (map[index] > best) {
              best = map[index];
              best_index = index;
            }
          }
        }
        const int64_t bin = ph * s.pooled_width + pw;
        out[c * bins + bin] = best;
        argmax[c * bins + bin] = static_cast<detail::index_t>(best_index);
      }
    }
  }
}

} // namespace

std::tuple<at::Tensor, at::Tensor> roi_pool(const at::Tensor& input, const at::Tensor& rois,
                                            double spatial_scale, int64_t pooled_height,
                                            int64_t pooled_width) {
  const detail::RoiShapes s = detail::check_roi_args(kOp, input, rois, pooled_height, pooled_width);
  at::Tensor output = at::zeros({s.num_rois, s.channels, pooled_height, pooled_width}, input.options());
  at::Tensor argmax = at::zeros(output.sizes(), input.options().dtype(detail::kIndexDtype));
  if (output.numel() == 0) {
    return {output, argmax};
  }
  const at::Tensor in = input.contiguous();
  const at::Tensor boxes = rois.contiguous();
  const Shape shape{s.channels, s.height, s.width, pooled_height, pooled_width};
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "torchvision_roi_pool", [&] {
    const scalar_t* image = in.const_data_ptr<scalar_t>();
    const scalar_t* roi = boxes.const_data_ptr<scalar_t>();
    scalar_t* out = output.mutable_data_ptr<scalar_t>();
    detail::index_t* arg = argmax.mutable_data_ptr<detail::index_t>();
    const int64_t image_size = s.channels * s.height * s.width;
    const int64_t out_size = s.channels * pooled_height * pooled_width;
    for (int64_t k = 0; k < s.num_rois; ++k, roi += 5) {
      const int64_t b = detail::roi_batch_index(kOp, roi, k, s.batch);
      roi_pool_one(image + b * image_size, roi, static_cast<scalar_t>(spatial_scale), shape, out + k * out_size,
                   arg + k * out_size);
    }
  });
  return {output, argmax};
}

} // namespace lightweight_dispatch::custom
