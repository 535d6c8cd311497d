// torchvision::ps_roi_pool: position-sensitive average pooling over quantised bins (R-FCN) on the CPU.
#include <custom_kernels/roi_common.h>
#include <lightweight_dispatch/torchvision_kernels.h>

#include <ATen/Dispatch.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cmath>

namespace lightweight_dispatch::custom {

namespace {

constexpr const char* kOp = "torchvision::ps_roi_pool";

struct Shape {
  int64_t channels_out, height, width, pooled_height, pooled_width;
};

template <typename T>
void ps_roi_pool_one(const T* image, const T* roi, T scale, const Shape& s, T* out,
                     detail::index_t* channel_map) {
  const int64_t start_w = static_cast<int64_t>(std::round(roi[1] * scale));
  const int64_t start_h = static_cast<int64_t>(std::round(roi[2] * scale));
  const int64_t end_w = static_cast<int64_t>(std::round(roi[3] * scale));
  const int64_t end_h = static_cast<int64_t>(std::round(roi[4] * scale));
  // torchvision's ps_roi_pool differs from roi_pool here: the extent has no +1, and bins are clipped to
  // [0, size - 1] rather than [0, size], so the last row and column of the map are never pooled.
  const int64_t roi_width = std::max<int64_t>(end_w - start_w, 1);
  const int64_t roi_height = std::max<int64_t>(end_h - start_h, 1);
  const T bin_h = static_cast<T>(roi_height) / static_cast<T>(s.pooled_height);
  const T bin_w = static_cast<T>(roi_width) / static_cast<T>(s.pooled_width);

  const int64_t bins = s.pooled_height * s.pooled_width;
  const int64_t map_size = s.height * s.width;
  for (int64_t ph = 0; ph < s.pooled_height; ++ph) {
    const auto [h0, h1] = detail::quantised_bin(ph, bin_h, start_h, s.height - 1);
    for (int64_t pw = 0; pw < s.pooled_width; ++pw) {
      const auto [w0, w1] = detail::quantised_bin(pw, bin_w, start_w, s.width - 1);
      const bool empty = h1 <= h0 || w1 <= w0;
      const int64_t bin = ph * s.pooled_width + pw;
      for (int64_t c = 0; c < s.channels_out; ++c) {
        const int64_t c_in = c * bins + bin;
        const T* map = image + c_in * map_size;
        T sum = 0;
        for (int64_t h = h0; h < h1; ++h) {
          for (int64_t w = w0; w < w1; ++w) {
            sum += map[h * s.width + w];
          }
        }
        out[c * bins + bin] = empty ? T(0) : sum / static_cast<T>((h1 - h0) * (w1 - w0));
        channel_map[c * bins + bin] = static_cast<detail::index_t>(c_in);
      }
    }
  }
}

} // namespace

std::tuple<at::Tensor, at::Tensor> ps_roi_pool(const at::Tensor& input, const at::Tensor& rois,
                                               double spatial_scale, int64_t pooled_height,
                                               int64_t pooled_width) {
  const detail::RoiShapes s = detail::check_roi_args(kOp, input, rois, pooled_height, pooled_width);
  const int64_t bins = pooled_height * pooled_width;
  TORCH_CHECK(s.channels % bins == 0, kOp, ": input channels (", s.channels,
              ") must be a multiple of pooled_height * pooled_width (", bins, ")");
  const int64_t channels_out = s.channels / bins;
  at::Tensor output = at::zeros({s.num_rois, channels_out, pooled_height, pooled_width}, input.options());
  at::Tensor channel_map = at::zeros(output.sizes(), input.options().dtype(detail::kIndexDtype));
  if (output.numel() == 0) {
    return {output, channel_map};
  }
  const at::Tensor in = input.contiguous();
  const at::Tensor boxes = rois.contiguous();
  const Shape shape{channels_out, s.height, s.width, pooled_height, pooled_width};
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "torchvision_ps_roi_pool", [&] {
    const scalar_t* image = in.const_data_ptr<scalar_t>();
    const scalar_t* roi = boxes.const_data_ptr<scalar_t>();
    scalar_t* out = output.mutable_data_ptr<scalar_t>();
    detail::index_t* map = channel_map.mutable_data_ptr<detail::index_t>();
    const int64_t image_size = s.channels * s.height * s.width;
    const int64_t out_size = channels_out * bins;
    for (int64_t k = 0; k < s.num_rois; ++k, roi += 5) {
      const int64_t b = detail::roi_batch_index(kOp, roi, k, s.batch);
      ps_roi_pool_one(image + b * image_size, roi, static_cast<scalar_t>(spatial_scale), shape,
                      out + k * out_size, map + k * out_size);
    }
  });
  return {output, channel_map};
}

} // namespace lightweight_dispatch::custom
