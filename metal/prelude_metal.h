// Metal prelude: the kernels are written in MSL, so this only opens its library.
#include <metal_stdlib>
using namespace metal;

// Every helper is inlined: a thread's arrays passed by reference to a call that
// is not inlined would leave registers for memory.
#define METAL_FUNC inline __attribute__((always_inline))
