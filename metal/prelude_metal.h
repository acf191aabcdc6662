// Metal prelude: the kernels are written in MSL, so this only opens its library.
#include <metal_stdlib>
using namespace metal;
