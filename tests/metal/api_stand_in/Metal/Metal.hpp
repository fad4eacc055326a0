// A declaration-only stand-in for the parts of metal-cpp's Metal that qkern's Metal host code
// calls (see Foundation/Foundation.hpp beside it): compiled, never linked or run.
#pragma once

#include <Foundation/Foundation.hpp>

namespace MTL {

enum ResourceOptions : NS::UInteger { ResourceStorageModeShared = 0 };
enum DataType : NS::UInteger { DataTypeUInt = 33, DataTypeBool = 53 };
enum CommandBufferStatus : NS::UInteger { CommandBufferStatusCompleted = 4, CommandBufferStatusError = 5 };

struct Size {
    Size(NS::UInteger width, NS::UInteger height, NS::UInteger depth);
};

class Buffer : public NS::Referencing<Buffer> {
public:
    NS::UInteger length() const;
    void* contents();
};

class FunctionConstantValues : public NS::Referencing<FunctionConstantValues> {
public:
    static FunctionConstantValues* alloc();
    FunctionConstantValues* init();
    void setConstantValue(const void* value, DataType type, NS::UInteger index);
};

class Function : public NS::Referencing<Function> {};

class Library : public NS::Referencing<Library> {
public:
    Function* newFunction(const NS::String* name, const FunctionConstantValues* constants, NS::Error** error);
};

class CompileOptions : public NS::Referencing<CompileOptions> {
public:
    static CompileOptions* alloc();
    CompileOptions* init();
    void setFastMathEnabled(bool enabled);
};

class ComputePipelineState : public NS::Referencing<ComputePipelineState> {
public:
    NS::UInteger maxTotalThreadsPerThreadgroup() const;
    NS::UInteger threadExecutionWidth() const;
};

class ComputeCommandEncoder : public NS::Referencing<ComputeCommandEncoder> {
public:
    void setComputePipelineState(const ComputePipelineState* state);
    void setBuffer(const Buffer* buffer, NS::UInteger offset, NS::UInteger index);
    void setBytes(const void* bytes, NS::UInteger length, NS::UInteger index);
    void setThreadgroupMemoryLength(NS::UInteger length, NS::UInteger index);
    void dispatchThreadgroups(Size threadgroups, Size threads_per_threadgroup);
    void endEncoding();
};

class CommandBuffer : public NS::Referencing<CommandBuffer> {
public:
    ComputeCommandEncoder* computeCommandEncoder();
    void commit();
    void waitUntilCompleted();
    CommandBufferStatus status() const;
    NS::Error* error() const;
};

class CommandQueue : public NS::Referencing<CommandQueue> {
public:
    CommandBuffer* commandBuffer();
};

class Device : public NS::Referencing<Device> {
public:
    NS::String* name() const;
    NS::UInteger maxThreadgroupMemoryLength() const;
    NS::UInteger maxBufferLength() const;
    CommandQueue* newCommandQueue();
    Buffer* newBuffer(NS::UInteger length, ResourceOptions options);
    Library* newLibrary(const NS::String* source, const CompileOptions* options, NS::Error** error);
    ComputePipelineState* newComputePipelineState(const Function* function, NS::Error** error);
};

Device* CreateSystemDefaultDevice();
NS::Array* CopyAllDevices();

} // namespace MTL
