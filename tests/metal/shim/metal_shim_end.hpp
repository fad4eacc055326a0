// Removes the MSL keyword macros that <metal_stdlib> defines, so code after an included .metal
// file (std::thread, a `device` variable) compiles as usual. Include it after each such file.
// No include guard: every inclusion must take effect.
#undef kernel
#undef device
#undef constant
#undef thread
#undef threadgroup
