// torchvision::nms: greedy non-maximum suppression on the CPU.
#include <custom_kernels/roi_common.h>
#include <lightweight_dispatch/torchvision_kernels.h>

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace lightweight_dispatch::custom {

namespace {

constexpr const char* kOp = "torchvision::nms";

// Box indices by descending score; equal scores keep index order (torchvision sorts stably). NaN ranks
// first, as in torch.sort, which also keeps the comparison a strict weak order.
template <typename T>
std::vector<int64_t> order_by_score(const T* scores, int64_t count) {
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [scores](int64_t a, int64_t b) {
    const bool a_nan = std::isnan(scores[a]);
    const bool b_nan = std::isnan(scores[b]);
    return a_nan != b_nan ? a_nan : scores[a] > scores[b];
  });
  return order;
}

template <typename T>
int64_t nms_impl(const T* boxes, const T* scores, int64_t count, double iou_threshold, int64_t* keep) {
  std::vector<T> areas(count);
  for (int64_t i = 0; i < count; ++i) {
    const T* box = boxes + 4 * i;
    areas[i] = (box[2] - box[0]) * (box[3] - box[1]);
  }
  const std::vector<int64_t> order = order_by_score(scores, count);
  std::vector<char> suppressed(count, 0);
  int64_t kept = 0;
  for (int64_t rank = 0; rank < count; ++rank) {
    const int64_t i = order[rank];
    if (suppressed[i]) {
      continue;
    }
    keep[kept++] = i;
    const T* a = boxes + 4 * i;
    for (int64_t later = rank + 1; later < count; ++later) {
      const int64_t j = order[later];
      if (suppressed[j]) {
        continue;
      }
      const T* b = boxes + 4 * j;
      const T w = std::max(T(0), std::min(a[2], b[2]) - std::max(a[0], b[0]));
      const T h = std::max(T(0), std::min(a[3], b[3]) - std::max(a[1], b[1]));
      const T inter = w * h;
      // Computed in T and compared in double, as torchvision does. Two empty boxes give 0/0 = NaN: kept.
      const T iou = inter / (areas[i] + areas[j] - inter);
      if (static_cast<double>(iou) > iou_threshold) {
        suppressed[j] = 1;
      }
    }
  }
  return kept;
}

} // namespace

at::Tensor nms(const at::Tensor& dets, const at::Tensor& scores, double iou_threshold) {
  detail::check_floating_cpu(kOp, "dets", dets);
  detail::check_floating_cpu(kOp, "scores", scores);
  TORCH_CHECK(dets.dim() == 2 && dets.size(1) == 4, kOp, ": dets must have shape [N, 4] (x1, y1, x2, y2), got ",
              dets.sizes());
  TORCH_CHECK(scores.dim() == 1, kOp, ": scores must be a 1-D tensor [N], got shape ", scores.sizes());
  TORCH_CHECK(dets.size(0) == scores.size(0), kOp, ": dets and scores must have the same number of boxes, got ",
              dets.size(0), " and ", scores.size(0));
  detail::check_same_dtype(kOp, "dets", dets, "scores", scores);

  const int64_t count = dets.size(0);
  at::Tensor keep = at::empty({count}, dets.options().dtype(at::kLong));
  if (count == 0) {
    return keep;
  }
  const at::Tensor boxes = dets.contiguous();
  const at::Tensor ranked = scores.contiguous();
  int64_t kept = 0;
  AT_DISPATCH_FLOATING_TYPES(boxes.scalar_type(), "torchvision_nms", [&] {
    kept = nms_impl(boxes.const_data_ptr<scalar_t>(), ranked.const_data_ptr<scalar_t>(), count, iou_threshold,
                    keep.mutable_data_ptr<int64_t>());
  });
  return keep.narrow(0, 0, kept);
}

} // namespace lightweight_dispatch::custom
