// CPU kernels for torchvision's six detection ops, with torchvision 0.29's schemas and CPU semantics, so that a
// model exported with real torchvision runs without libtorchvision. The generated unboxing code calls these
// functions directly; `kernel_check` runs them on tensors saved from Python.
//
// All kernels accept float32 and float64 (every floating argument must share one dtype), make their inputs
// contiguous, and report bad arguments as a c10::Error whose message starts with "torchvision::<op>:".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace lightweight_dispatch::custom {

// torchvision::nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor
// Greedy non-maximum suppression of boxes [N, 4] as (x1, y1, x2, y2). Returns the kept indices (int64), in
// descending score order (equal scores: lower index first). A box is dropped when its IoU with a kept box
// is greater than `iou_threshold`.
at::Tensor nms(const at::Tensor& dets, const at::Tensor& scores, double iou_threshold);

// torchvision::roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height,
//                        SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor
// Average of bilinear samples per bin. `input` is [N, C, H, W], `rois` [K, 5] as (batch_index, x1, y1, x2, y2)
// in input-image coordinates. Returns [K, C, pooled_height, pooled_width].
at::Tensor roi_align(const at::Tensor& input, const at::Tensor& rois, double spatial_scale,
                     int64_t pooled_height, int64_t pooled_width, int64_t sampling_ratio, bool aligned);

// torchvision::roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height,
//                       SymInt pooled_width) -> (Tensor, Tensor)
// Max per bin. Returns the pooled [K, C, pooled_height, pooled_width] and, as torchvision does, an int32
// argmax (index into H * W, -1 for an empty bin, whose value is 0).
std::tuple<at::Tensor, at::Tensor> roi_pool(const at::Tensor& input, const at::Tensor& rois,
                                            double spatial_scale, int64_t pooled_height,
                                            int64_t pooled_width);

// torchvision::ps_roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height,
//                           SymInt pooled_width, int sampling_ratio) -> (Tensor, Tensor)
// Position-sensitive RoIAlign: output channel c, bin (ph, pw) averages input channel
// (c * pooled_height + ph) * pooled_width + pw. Returns [K, C / (ph * pw), ph, pw] and the int32 channel map.
std::tuple<at::Tensor, at::Tensor> ps_roi_align(const at::Tensor& input, const at::Tensor& rois,
                                                double spatial_scale, int64_t pooled_height,
                                                int64_t pooled_width, int64_t sampling_ratio);

// torchvision::ps_roi_pool(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height,
//                          SymInt pooled_width) -> (Tensor, Tensor)
// Position-sensitive average pooling, channels as in ps_roi_align.
std::tuple<at::Tensor, at::Tensor> ps_roi_pool(const at::Tensor& input, const at::Tensor& rois,
                                               double spatial_scale, int64_t pooled_height,
                                               int64_t pooled_width);

// torchvision::deform_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor mask, Tensor bias,
//     SymInt stride_h, SymInt stride_w, SymInt pad_h, SymInt pad_w, SymInt dilation_h, SymInt dilation_w,
//     SymInt groups, SymInt offset_groups, bool use_mask) -> Tensor
// Deformable convolution (v2 when use_mask): each kernel tap samples the input bilinearly (zero outside) at
// its regular position plus a learned (dy, dx) from `offset` [B, 2 * offset_groups * kh * kw, outH, outW],
// scaled by `mask` [B, offset_groups * kh * kw, outH, outW] when use_mask. `bias` is [out_channels].
at::Tensor deform_conv2d(const at::Tensor& input, const at::Tensor& weight, const at::Tensor& offset,
                         const at::Tensor& mask, const at::Tensor& bias, int64_t stride_h, int64_t stride_w,
                         int64_t pad_h, int64_t pad_w, int64_t dilation_h, int64_t dilation_w, int64_t groups,
                         int64_t offset_groups, bool use_mask);

} // namespace lightweight_dispatch::custom
