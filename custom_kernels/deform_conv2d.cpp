// torchvision::deform_conv2d: deformable convolution (v1, and v2 with a modulation mask) on the CPU.
//
// Per image: gather every kernel tap's bilinear sample into a column matrix [C * kh * kw, outH * outW]
// (deformable im2col), then one batched matrix product per image over the convolution groups.
#include <custom_kernels/roi_common.h>
#include <lightweight_dispatch/torchvision_kernels.h>

#include <ATen/Dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/empty.h>

#include <cmath>
#include <vector>

namespace lightweight_dispatch::custom {

namespace {

constexpr const char* kOp = "torchvision::deform_conv2d";

struct ConvGeometry {
  int64_t batch, in_channels, height, width;
  int64_t out_channels, kernel_h, kernel_w, out_h, out_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t groups, offset_groups;
  bool use_mask;
};

// Deformable convolution's bilinear rule, unlike RoIAlign's: the map is zero-padded, so a point within one
// pixel outside the map blends the edge with zeros; farther out (or NaN) it samples 0.
template <typename T>
T sample_zero_padded(const T* map, int64_t height, int64_t width, T y, T x) {
  if (!(y > T(-1) && y < static_cast<T>(height) && x > T(-1) && x < static_cast<T>(width))) {
    return T(0);
  }
  const int64_t y0 = static_cast<int64_t>(std::floor(y));
  const int64_t x0 = static_cast<int64_t>(std::floor(x));
  const int64_t y1 = y0 + 1;
  const int64_t x1 = x0 + 1;
  const T ly = y - static_cast<T>(y0);
  const T lx = x - static_cast<T>(x0);
  const T hy = T(1) - ly;
  const T hx = T(1) - lx;
  const T v00 = (y0 >= 0 && x0 >= 0) ? map[y0 * width + x0] : T(0);
  const T v01 = (y0 >= 0 && x1 < width) ? map[y0 * width + x1] : T(0);
  const T v10 = (y1 < height && x0 >= 0) ? map[y1 * width + x0] : T(0);
  const T v11 = (y1 < height && x1 < width) ? map[y1 * width + x1] : T(0);
  return hy * hx * v00 + hy * lx * v01 + ly * hx * v10 + ly * lx * v11;
}

// Fills columns [C * kh * kw, outH * outW] for one image; row (c * kh + i) * kw + j holds input channel c
// sampled at kernel tap (i, j) for every output position, scaled by the mask when use_mask.
template <typename T>
void deformable_im2col(const T* image, const T* offset, const T* mask, const ConvGeometry& g, T* columns) {
  const int64_t out_size = g.out_h * g.out_w;
  const int64_t taps = g.kernel_h * g.kernel_w;
  const int64_t channels_per_offset_group = g.in_channels / g.offset_groups;
  for (int64_t c = 0; c < g.in_channels; ++c) {
    const T* map = image + c * g.height * g.width;
    const int64_t group = c / channels_per_offset_group;
    for (int64_t i = 0; i < g.kernel_h; ++i) {
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        const int64_t tap = i * g.kernel_w + j;
        // Offsets come in (dy, dx) channel pairs per offset group and tap.
        const T* dy = offset + (group * taps + tap) * 2 * out_size;
        const T* dx = dy + out_size;
        const T* scale = g.use_mask ? mask + (group * taps + tap) * out_size : nullptr;
        T* row = columns + (c * taps + tap) * out_size;
        for (int64_t oy = 0; oy < g.out_h; ++oy) {
          const int64_t base_y = oy * g.stride_h - g.pad_h + i * g.dilation_h;
          for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const int64_t base_x = ox * g.stride_w - g.pad_w + j * g.dilation_w;
            const int64_t p = oy * g.out_w + ox;
            const T value = sample_zero_padded(map, g.height, g.width, static_cast<T>(base_y) + dy[p],
                                               static_cast<T>(base_x) + dx[p]);
            row[p] = scale != nullptr ? scale[p] * value : value;
          }
        }
      }
    }
  }
}

// out [B, O, outH * outW] = per group, weight [O/G, C/G * kh * kw] x columns, plus bias.
template <typename T>
void deform_conv2d_impl(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                        const at::Tensor& mask, const at::Tensor& bias, const ConvGeometry& g, at::Tensor& out) {
  const int64_t out_size = g.out_h * g.out_w;
  const int64_t taps = g.kernel_h * g.kernel_w;
  at::Tensor columns = at::empty({g.in_channels * taps, out_size}, input.options());
  const int64_t group_rows = g.in_channels / g.groups * taps;
  const at::Tensor grouped_columns = columns.view({g.groups, group_rows, out_size});
  const at::Tensor grouped_weight = weight.view({g.groups, g.out_channels / g.groups, group_rows});
  const int64_t offset_size = offset.numel() / g.batch;
  const int64_t mask_size = g.use_mask ? mask.numel() / g.batch : 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    deformable_im2col(input[b].const_data_ptr<T>(), offset.const_data_ptr<T>() + b * offset_size,
                      g.use_mask ? mask.const_data_ptr<T>() + b * mask_size : nullptr, g,
                      columns.mutable_data_ptr<T>());
    at::Tensor grouped_out = out[b].view({g.groups, g.out_channels / g.groups, out_size});
    at::cpu::bmm_out(grouped_out, grouped_weight, grouped_columns);
  }
  const T* bias_data = bias.const_data_ptr<T>();
  T* out_data = out.mutable_data_ptr<T>();
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t o = 0; o < g.out_channels; ++o) {
      T* plane = out_data + (b * g.out_channels + o) * out_size;
      for (int64_t p = 0; p < out_size; ++p) {
        plane[p] += bias_data[o];
      }
    }
  }
}

// Output extent of one axis, or -1 when the dilated kernel does not fit in the padded input.
int64_t output_extent(int64_t in, int64_t pad, int64_t kernel, int64_t dilation, int64_t stride) {
  const int64_t span = in + 2 * pad - (dilation * (kernel - 1) + 1);
  return span < 0 ? -1 : span / stride + 1;
}

ConvGeometry check_args(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                        const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h, int64_t stride_w,
                        int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t groups,
                        int64_t offset_groups, bool use_mask) {
  detail::check_floating_cpu(kOp, "input", input);
  detail::check_floating_cpu(kOp, "weight", weight);
  detail::check_floating_cpu(kOp, "offset", offset);
  detail::check_floating_cpu(kOp, "bias", bias);
  detail::check_same_dtype(kOp, "weight", weight, "input", input);
  detail::check_same_dtype(kOp, "offset", offset, "input", input);
  detail::check_same_dtype(kOp, "bias", bias, "input", input);
  TORCH_CHECK(input.dim() == 4, kOp, ": input must be a 4-D tensor [B, C, H, W], got shape ", input.sizes());
  TORCH_CHECK(weight.dim() == 4, kOp, ": weight must be a 4-D tensor [O, C / groups, kh, kw], got shape ",
              weight.sizes());
  TORCH_CHECK(offset.dim() == 4, kOp, ": offset must be a 4-D tensor, got shape ", offset.sizes());
  TORCH_CHECK(stride_h > 0 && stride_w > 0, kOp, ": stride must be positive, got (", stride_h, ", ", stride_w, ")");
  TORCH_CHECK(pad_h >= 0 && pad_w >= 0, kOp, ": padding must be non-negative, got (", pad_h, ", ", pad_w, ")");
  TORCH_CHECK(dilation_h > 0 && dilation_w > 0, kOp, ": dilation must be positive, got (", dilation_h, ", ",
              dilation_w, ")");
  TORCH_CHECK(groups > 0 && offset_groups > 0, kOp, ": groups and offset_groups must be positive, got ", groups,
              " and ", offset_groups);

  ConvGeometry g{};
  g.batch = input.size(0);
  g.in_channels = input.size(1);
  g.height = input.size(2);
  g.width = input.size(3);
  g.out_channels = weight.size(0);
  g.kernel_h = weight.size(2);
  g.kernel_w = weight.size(3);
  TORCH_CHECK(g.kernel_h > 0 && g.kernel_w > 0, kOp, ": weight has an empty kernel, shape ", weight.sizes());
  TORCH_CHECK(weight.size(1) * groups == g.in_channels, kOp, ": weight.shape[1] (", weight.size(1),
              ") * groups (", groups, ") must equal the input channels (", g.in_channels, ")");
  TORCH_CHECK(g.out_channels % groups == 0, kOp, ": output channels (", g.out_channels,
              ") must be divisible by groups (", groups, ")");
  TORCH_CHECK(g.in_channels % offset_groups == 0, kOp, ": input channels (", g.in_channels,
              ") must be divisible by offset_groups (", offset_groups, ")");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == g.out_channels, kOp, ": bias must have shape [", g.out_channels,
              "], got ", bias.sizes());
  g.out_h = output_extent(g.height, pad_h, g.kernel_h, dilation_h, stride_h);
  g.out_w = output_extent(g.width, pad_w, g.kernel_w, dilation_w, stride_w);
  TORCH_CHECK(g.out_h > 0 && g.out_w > 0, kOp, ": the dilated kernel (", g.kernel_h, "x", g.kernel_w,
              ", dilation ", dilation_h, "x", dilation_w, ") does not fit the padded input ", input.sizes());

  const int64_t taps = g.kernel_h * g.kernel_w;
  const std::vector<int64_t> offset_shape{g.batch, 2 * offset_groups * taps, g.out_h, g.out_w};
  TORCH_CHECK(offset.sizes() == at::IntArrayRef(offset_shape), kOp, ": offset must have shape ",
              at::IntArrayRef(offset_shape),
              " [B, 2 * offset_groups * kh * kw, outH, outW], got ", offset.sizes());
  if (use_mask) {
    detail::check_floating_cpu(kOp, "mask", mask);
    detail::check_same_dtype(kOp, "mask", mask, "input", input);
    const std::vector<int64_t> mask_shape{g.batch, offset_groups * taps, g.out_h, g.out_w};
    TORCH_CHECK(mask.sizes() == at::IntArrayRef(mask_shape), kOp, ": mask must have shape ",
                at::IntArrayRef(mask_shape),
                " [B, offset_groups * kh * kw, outH, outW], got ", mask.sizes());
  }
  g.stride_h = stride_h;
  g.stride_w = stride_w;
  g.pad_h = pad_h;
  g.pad_w = pad_w;
  g.dilation_h = dilation_h;
  g.dilation_w = dilation_w;
  g.groups = groups;
  g.offset_groups = offset_groups;
  g.use_mask = use_mask;
  return g;
}

} // namespace

at::Tensor deform_conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                         const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t groups,
                         int64_t offset_groups, bool use_mask) {
  const ConvGeometry g = check_args(input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dilation_h,
                                    dilation_w, groups, offset_groups, use_mask);
  at::Tensor out = at::empty({g.batch, g.out_channels, g.out_h, g.out_w}, input.options());
  if (out.numel() == 0) {
    return out;
  }
  // The mask is only read when use_mask: callers without one pass any placeholder (torchvision: zeros [B, 1]).
  const at::Tensor mask_c = use_mask ? mask.contiguous() : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "torchvision_deform_conv2d", [&] {
    deform_conv2d_impl<scalar_t>(input.contiguous(), weight.contiguous(), offset.contiguous(), mask_c,
                                 bias.contiguous(), g, out);
  });
  return out;
}

} // namespace lightweight_dispatch::custom
