// ext_leaky_square(x, alpha) = x * x where x > 0, alpha * x elsewhere: a CPU custom op with its
// gradient op. It has no C++ SPMD rule: paddle-ext dispatch calls it on local shards, and the
// layout comes from the Python rule registered in op.py.
#include <vector>

#include "paddle/extension.h"

std::vector<paddle::Tensor> LeakySquareForward(const paddle::Tensor& x, float alpha) {
  PD_CHECK(x.place() == paddle::PlaceType::kCPU, "ext_leaky_square: CPU tensors only");
  auto out = paddle::empty_like(x);
  const float* xp = x.data<float>();
  float* op = out.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) op[i] = xp[i] > 0.f ? xp[i] * xp[i] : alpha * xp[i];
  return {out};
}

std::vector<paddle::Tensor> LeakySquareBackward(const paddle::Tensor& x, const paddle::Tensor& dout,
                                                float alpha) {
  auto dx = paddle::empty_like(x);
  const float* xp = x.data<float>();
  const float* gp = dout.data<float>();
  float* dp = dx.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dp[i] = (xp[i] > 0.f ? 2.f * xp[i] : alpha) * gp[i];
  return {dx};
}

std::vector<std::vector<int64_t>> LeakySquareShape(const std::vector<int64_t>& x) { return {x}; }
std::vector<paddle::DataType> LeakySquareDtype(const paddle::DataType& x) { return {x}; }

PD_BUILD_OP(ext_leaky_square)
    .Inputs({"X"})
    .Outputs({"Out"})
    .Attrs({"alpha: float"})
    .SetKernelFn(PD_KERNEL(LeakySquareForward))
    .SetInferShapeFn(PD_INFER_SHAPE(LeakySquareShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(LeakySquareDtype));

PD_BUILD_GRAD_OP(ext_leaky_square)
    .Inputs({"X", paddle::Grad("Out")})
    .Outputs({paddle::Grad("X")})
    .Attrs({"alpha: float"})
    .SetKernelFn(PD_KERNEL(LeakySquareBackward));
