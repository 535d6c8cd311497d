// torchvision::ps_roi_align: position-sensitive RoIAlign (R-FCN's pooling with bilinear samples) on the CPU.
#include <custom_kernels/roi_common.h>
#include <lightweight_dispatch/torchvision_kernels.h>

#include <ATen/Dispatch.h>
#include <ATen/ops/zeros.h>

#include <vector>

namespace lightweight_dispatch::custom {

namespace {

constexpr const char* kOp = "torchvision::ps_roi_align";

struct PoolParams {
  int64_t channels_out, height, width, pooled_height, pooled_width, sampling_ratio;
};

template <typename T>
void ps_roi_align_one(const T* image, const T* roi, T scale, const PoolParams& p, T* out,
                      detail::index_t* channel_map) {
  // Always the half-pixel-aligned box, and no minimum roi size (unlike roi_align's legacy mode).
  const T start_w = roi[1] * scale - T(0.5);
  const T start_h = roi[2] * scale - T(0.5);
  const T roi_width = roi[3] * scale - T(0.5) - start_w;
  const T roi_height = roi[4] * scale - T(0.5) - start_h;
  const T bin_h = roi_height / static_cast<T>(p.pooled_height);
  const T bin_w = roi_width / static_cast<T>(p.pooled_width);
  const int64_t grid_h = detail::samples_per_bin(p.sampling_ratio, roi_height, p.pooled_height);
  const int64_t grid_w = detail::samples_per_bin(p.sampling_ratio, roi_width, p.pooled_width);
  // Unlike roi_align there is no max(count, 1): torchvision divides by the raw sample count, so an empty
  // sampling grid (a zero-size roi with sampling_ratio <= 0) yields 0/0 = NaN. Kept for fidelity.
  const T count = static_cast<T>(grid_h * grid_w);

  const int64_t bins = p.pooled_height * p.pooled_width;
  const int64_t map_size = p.height * p.width;
  std::vector<detail::BilinearTap<T>> taps;
  for (int64_t ph = 0; ph < p.pooled_height; ++ph) {
    for (int64_t pw = 0; pw < p.pooled_width; ++pw) {
      // The bin's sample taps, shared by every output channel.
      taps.clear();
      const T bin_start_h = static_cast<T>(ph) * bin_h + start_h;
      const T bin_start_w = static_cast<T>(pw) * bin_w + start_w;
      for (int64_t iy = 0; iy < grid_h; ++iy) {
        const T y = bin_start_h + (static_cast<T>(iy) + T(0.5)) * bin_h / static_cast<T>(grid_h);
        for (int64_t ix = 0; ix < grid_w; ++ix) {
          const T x = bin_start_w + (static_cast<T>(ix) + T(0.5)) * bin_w / static_cast<T>(grid_w);
          taps.push_back(detail::roi_bilinear_tap(p.height, p.width, y, x));
        }
      }
      const int64_t bin = ph * p.pooled_width + pw;
      for (int64_t c = 0; c < p.channels_out; ++c) {
        // Position sensitivity: each bin of output channel c reads its own input channel.
        const int64_t c_in = c * bins + bin;
        const T* map = image + c_in * map_size;
        T sum = 0;
        for (const auto& tap : taps) {
          sum += tap.apply(map);
        }
        out[c * bins + bin] = sum / count;
        channel_map[c * bins + bin] = static_cast<detail::index_t>(c_in);
      }
    }
  }
}

} // namespace

std::tuple<at::Tensor, at::Tensor> ps_roi_align(const at::Tensor& input, const at::Tensor& rois,
                                                double spatial_scale, int64_t pooled_height,
                                                int64_t pooled_width, int64_t sampling_ratio) {
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
  const PoolParams params{channels_out, s.height, s.width, pooled_height, pooled_width, sampling_ratio};
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "torchvision_ps_roi_align", [&] {
    const scalar_t* image = in.const_data_ptr<scalar_t>();
    const scalar_t* roi = boxes.const_data_ptr<scalar_t>();
    scalar_t* out = output.mutable_data_ptr<scalar_t>();
    detail::index_t* map = channel_map.mutable_data_ptr<detail::index_t>();
    const int64_t image_size = s.channels * s.height * s.width;
    const int64_t out_size = channels_out * bins;
    for (int64_t k = 0; k < s.num_rois; ++k, roi += 5) {
      const int64_t b = detail::roi_batch_index(kOp, roi, k, s.batch);
      ps_roi_align_one(image + b * image_size, roi, static_cast<scalar_t>(spatial_scale), params,
                       out + k * out_size, map + k * out_size);
    }
  });
  return {output, channel_map};
}

} // namespace lightweight_dispatch::custom
