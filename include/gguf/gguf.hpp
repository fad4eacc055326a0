// qk::gguf: GGUF model files read (file: memory-mapped, validated, tensors as spans of qkern's
// blocks) and written (writer: atomically), with every GGUF tensor type's geometry
// (tensor_types). A layer of its own above kernels: see file.hpp.
#pragma once

#include "file.hpp"
#include "tensor_types.hpp"
#include "value.hpp"
#include "writer.hpp"
