// qk::gguf: GGUF model files read (file: memory-mapped, validated, tensors as spans of qkern's
// blocks) and written (writer: atomically), with every GGUF tensor type's geometry
// (tensor_types); whole models quantized and dequantized as llama.cpp's quantizer does (convert),
// with llama-imatrix's importance matrices (importance). A layer of its own above kernels: see file.hpp.
#pragma once

#include "convert.hpp"
#include "file.hpp"
#include "importance.hpp"
#include "tensor_types.hpp"
#include "value.hpp"
#include "writer.hpp"
