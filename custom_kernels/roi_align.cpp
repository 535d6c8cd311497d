// torchvision::roi_align: average of bilinear samples per bin (Mask R-CNN's RoIAlign) on the CPU.
#include <custom_kernels/roi_common.h>
#include <lightweight_dispatch/torchvision_kernels.h>

#include <ATen/Dispatch.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

namespace lightweight_dispatch::custom {

namespace {

constexpr const char* kOp = "torchvision::roi_align";

struct PoolParams {
  int64_t channels, height, width, pooled_height, pooled_width, sampling_ratio;
  bool aligned;
};

// Pools one roi into out [C, PH, PW]. The sample taps depend only on the roi, so they are computed once and
// reused for every channel.
template <typename T>
void roi_align_one(const T* image, const T* roi, T scale, const PoolParams& p, T* out) {
  // aligned=True moves the box by half a pixel so that pixel centres, not corners, sit at integer coordinates.
  const T offset = p.aligned ? T(0.5) : T(0);
  const T start_w = roi[1] * scale - offset;
  const T start_h = roi[2] * scale - offset;
  T roi_width = roi[3] * scale - offset - start_w;
  T roi_height = roi[4] * scale - offset - start_h;
  if (!p.aligned) {
    // The legacy (unaligned) behaviour forces degenerate rois to 1x1.
    roi_width = std::max(roi_width, T(1));
    roi_height = std::max(roi_height, T(1));
  }
  const T bin_h = roi_height / static_cast<T>(p.pooled_height);
  const T bin_w = roi_width / static_cast<T>(p.pooled_width);
  const int64_t grid_h = detail::samples_per_bin(p.sampling_ratio, roi_height, p.pooled_height);
  const int64_t grid_w = detail::samples_per_bin(p.sampling_ratio, roi_width, p.pooled_width);
  const int64_t taps_per_bin = std::max<int64_t>(grid_h, 0) * std::max<int64_t>(grid_w, 0);
  // An empty grid averages nothing: the bin is 0, not 0/0.
  const T count = static_cast<T>(std::max<int64_t>(grid_h * grid_w, 1));

  std::vector<detail::BilinearTap<T>> taps;
  taps.reserve(p.pooled_height * p.pooled_width * taps_per_bin);
  for (int64_t ph = 0; ph < p.pooled_height; ++ph) {
    for (int64_t pw = 0; pw < p.pooled_width; ++pw) {
      for (int64_t iy = 0; iy < grid_h; ++iy) {
        const T y = start_h + static_cast<T>(ph) * bin_h +
                    (static_cast<T>(iy) + T(0.5)) * bin_h / static_cast<T>(grid_h);
        for (int64_t ix = 0; ix < grid_w; ++ix) {
          const T x = start_w + static_cast<T>(pw) * bin_w +
                      (static_cast<T>(ix) + T(0.5)) * bin_w / static_cast<T>(grid_w);
          taps.push_back(detail::roi_bilinear_tap(p.height, p.width, y, x));
        }
      }
    }
  }

  const int64_t bins = p.pooled_height * p.pooled_width;
  for (int64_t c = 0; c < p.channels; ++c) {
    const T* map = image + c * p.height * p.width;
    const detail::BilinearTap<T>* tap = taps.data();
    for (int64_t bin = 0; bin < bins; ++bin) {
      T sum = 0;
      for (int64_t s = 0; s < taps_per_bin; ++s, ++tap) {
        sum += tap->apply(map);
      }
      out[c * bins + bin] = sum / count;
    }
  }
}

} // namespace

at::Tensor roi_align(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                     int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio, bool aligned) {
  const detail::RoiShapes s = detail::check_roi_args(kOp, input, rois, pooled_height, pooled_width);
  at::Tensor output = at::zeros({s.num_rois, s.channels, pooled_height, pooled_width}, input.options());
  if (output.numel() == 0) {
    return output;
  }
  const at::Tensor in = input.contiguous();
  const at::Tensor boxes = rois.contiguous();
  const PoolParams params{s.channels, s.height, s.width, pooled_height, pooled_width, sampling_ratio, aligned};
  AT_DISPATCH_FLOATING_TYPES(in.scalar_type(), "torchvision_roi_align", [&] {
    const scalar_t* image = in.const_data_ptr<scalar_t>();
    const scalar_t* roi = boxes.const_data_ptr<scalar_t>();
    scalar_t* out = output.mutable_data_ptr<scalar_t>();
    const int64_t image_size = s.channels * s.height * s.width;
    const int64_t out_size = s.channels * pooled_height * pooled_width;
    for (int64_t k = 0; k < s.num_rois; ++k, roi += 5) {
      const int64_t b = detail::roi_batch_index(kOp, roi, k, s.batch);
      roi_align_one(image + b * image_size, roi, static_cast<scalar_t>(spatial_scale), params, out + k * out_size);
    }
  });
  return output;
}

} // namespace lightweight_dispatch::custom
