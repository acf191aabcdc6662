// Metal prelude: the kernels are written in MSL, so this only opens its library.
#include <metal_stdlib>
using namespace metal;

// Every helper is inlined: a thread's arrays passed by reference to a call that
// is not inlined would leave registers for memory. (Apple's headers define the
// same macro; the definition here is for when they do not.)
#ifndef METAL_FUNC
#define METAL_FUNC inline __attribute__((always_inline))
#endif
