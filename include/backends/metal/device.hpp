// qk::backend::metal::device: one Metal device (Apple platforms only, through metal-cpp, which the
// user supplies), with the embedded MSL libraries built once, a thread-safe pipeline cache keyed
// by kernel name and function-constant values, shared-storage buffers and dispatch that waits.
// Included by metal.hpp only where __APPLE__ and QKERN_ENABLE_METAL are defined; one translation
// unit of the program defines NS_PRIVATE_IMPLEMENTATION and MTL_PRIVATE_IMPLEMENTATION first, as
// metal-cpp requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <Foundation/Foundation.hpp>
#include <Metal/Metal.hpp>

#include "../../kernels/error.hpp"
#include "../gpu/device_index.hpp"
#include "kernels.hpp"

namespace qk::backend::metal {

namespace detail {

// Releases a metal-cpp object when it goes out of scope (they are reference counted by hand).
template <class T>
struct released {
    void operator()(T* p) const noexcept
    {
        if (p != nullptr) {
            p->release();
        }
    }
};
template <class T>
using owned = std::unique_ptr<T, released<T>>;

inline std::string describe(NS::Error* error)
{
    if (error == nullptr || error->localizedDescription() == nullptr) {
        return "no description";
    }
    return error->localizedDescription()->utf8String();
}

} // namespace detail

// Shared-storage memory: the CPU and the GPU see the same bytes (Apple GPUs have unified memory).
class buffer {
public:
    buffer() = default;
    explicit buffer(MTL::Buffer* b) : handle_(b) {}

    [[nodiscard]] MTL::Buffer* get() const noexcept { return handle_.get(); }
    [[nodiscard]] std::size_t size() const noexcept { return handle_ ? handle_->length() : 0; }
    [[nodiscard]] void* contents() const noexcept { return handle_ ? handle_->contents() : nullptr; }

private:
    detail::owned<MTL::Buffer> handle_;
};

// One argument of a dispatch, in buffer-index order: a buffer, or a few bytes set inline.
struct argument {
    const buffer* memory = nullptr;
    std::vector<std::uint32_t> bytes;
};

struct dispatch_shape {
    std::uint32_t groups_x = 1, groups_y = 1, groups_z = 1;
    std::uint32_t threads_per_group = 32;
    std::uint32_t threadgroup_memory_bytes = 0; // at threadgroup index 0
};

class device {
public:
    // index < 0: QKERN_METAL_DEVICE if set, else the system default device.
    explicit device(int index = -1)
    {
        if (index < 0) {
            index = gpu::device_index_from_environment("QKERN_METAL_DEVICE", "metal");
        }
        if (index < 0) {
            device_.reset(MTL::CreateSystemDefaultDevice());
            if (!device_) {
                qk::detail::fail("qk::backend::metal: no Metal device is available");
            }
        } else {
            NS::Array* all = MTL::CopyAllDevices();
            const std::size_t count = all != nullptr ? all->count() : 0;
            if (static_cast<std::size_t>(index) >= count) {
                if (all != nullptr) {
                    all->release();
                }
                qk::detail::fail("qk::backend::metal: device index ", index, " is out of range: there are ", count, " Metal devices");
            }
            device_.reset(all->object<MTL::Device>(static_cast<NS::UInteger>(index))->retain());
            all->release();
        }
        queue_.reset(device_->newCommandQueue());
        name_ = device_->name()->utf8String();
        max_threadgroup_memory_ = static_cast<std::size_t>(device_->maxThreadgroupMemoryLength());
        max_buffer_bytes_ = static_cast<std::size_t>(device_->maxBufferLength());
    }

    device(const device&) = delete;
    device& operator=(const device&) = delete;

    [[nodiscard]] const std::string& name() const noexcept { return name_; }
    [[nodiscard]] std::size_t max_threadgroup_memory() const noexcept { return max_threadgroup_memory_; }
    [[nodiscard]] std::size_t max_buffer_bytes() const noexcept { return max_buffer_bytes_; }
    [[nodiscard]] MTL::Device* get() const noexcept { return device_.get(); }

    [[nodiscard]] buffer make_buffer(std::size_t bytes) const
    {
        MTL::Buffer* b = device_->newBuffer(bytes < 4 ? 4 : bytes, MTL::ResourceStorageModeShared);
        if (b == nullptr) {
            qk::detail::fail("qk::backend::metal: a buffer of ", bytes, " bytes could not be allocated on ", name_);
        }
        return buffer(b);
    }

    // The pipeline of `k` with these function-constant values, built on first use (the library of
    // its source once per device), checked against the device's limits for `shape`.
    MTL::ComputePipelineState* pipeline(const kernel_info& k, std::span<const constant_value> constants,
                                        const dispatch_shape& shape) const
    {
        if (shape.threadgroup_memory_bytes > max_threadgroup_memory_) {
            qk::detail::fail("qk::backend::metal: kernel ", k.name, " needs ", shape.threadgroup_memory_bytes,
                             " bytes of threadgroup memory; ", name_, " has ", max_threadgroup_memory_);
        }
        const std::lock_guard lock(mutex_);
        key_type key{std::string(k.name), std::vector<constant_value>(constants.begin(), constants.end())};
        auto it = pipelines_.find(key);
        if (it == pipelines_.end()) {
            MTL::Library* library = library_for(k);
            detail::owned<MTL::FunctionConstantValues> values(MTL::FunctionConstantValues::alloc()->init());
            for (const constant_value& c : constants) {
                const bool flag = c.value != 0;
                if (c.type == constant_type::boolean) {
                    values->setConstantValue(&flag, MTL::DataTypeBool, c.index);
                } else {
                    values->setConstantValue(&c.value, MTL::DataTypeUInt, c.index);
                }
            }
            NS::Error* error = nullptr;
            detail::owned<MTL::Function> function(
                library->newFunction(NS::String::string(std::string(k.name).c_str(), NS::UTF8StringEncoding), values.get(), &error));
            if (!function) {
                qk::detail::fail("qk::backend::metal: kernel ", k.name, " could not be specialized: ", detail::describe(error));
            }
            MTL::ComputePipelineState* state = device_->newComputePipelineState(function.get(), &error);
            if (state == nullptr) {
                qk::detail::fail("qk::backend::metal: pipeline ", k.name, " could not be built: ", detail::describe(error));
            }
            it = pipelines_.emplace(std::move(key), detail::owned<MTL::ComputePipelineState>(state)).first;
        }
        MTL::ComputePipelineState* state = it->second.get();
        if (shape.threads_per_group > state->maxTotalThreadsPerThreadgroup()) {
            qk::detail::fail("qk::backend::metal: kernel ", k.name, ": ", shape.threads_per_group,
                             " threads per threadgroup exceed this pipeline's limit of ", state->maxTotalThreadsPerThreadgroup());
        }
        return state;
    }

    // Encodes one dispatch, commits it and waits for it.
    void run(const kernel_info& k, std::span<const constant_value> constants, std::span<const argument> arguments,
             const dispatch_shape& shape) const
    {
        MTL::ComputePipelineState* state = pipeline(k, constants, shape);
        const std::lock_guard lock(queue_mutex_);
        MTL::CommandBuffer* commands = queue_->commandBuffer(); // autoreleased
        MTL::ComputeCommandEncoder* encoder = commands->computeCommandEncoder();
        encoder->setComputePipelineState(state);
        for (std::size_t i = 0; i < arguments.size(); ++i) {
            if (arguments[i].memory != nullptr) {
                encoder->setBuffer(arguments[i].memory->get(), 0, i);
            } else {
                encoder->setBytes(arguments[i].bytes.data(), arguments[i].bytes.size() * 4, i);
            }
        }
        if (shape.threadgroup_memory_bytes > 0) {
            encoder->setThreadgroupMemoryLength((shape.threadgroup_memory_bytes + 15) / 16 * 16, 0);
        }
        encoder->dispatchThreadgroups(MTL::Size(shape.groups_x, shape.groups_y, shape.groups_z),
                                      MTL::Size(shape.threads_per_group, 1, 1));
        encoder->endEncoding();
        commands->commit();
        commands->waitUntilCompleted();
        if (commands->status() == MTL::CommandBufferStatusError) {
            qk::detail::fail("qk::backend::metal: kernel ", k.name, " failed: ", detail::describe(commands->error()));
        }
    }

private:
    using key_type = std::pair<std::string, std::vector<constant_value>>;

    // Called with mutex_ held. Fast math stays off: the kernels rely on IEEE rounding (no fused or
    // reassociated arithmetic) for results equal to the CPU's.
    MTL::Library* library_for(const kernel_info& k) const
    {
        auto it = libraries_.find(k.source_name);
        if (it != libraries_.end()) {
            return it->second.get();
        }
        detail::owned<MTL::CompileOptions> options(MTL::CompileOptions::alloc()->init());
        options->setFastMathEnabled(false);
        NS::Error* error = nullptr;
        MTL::Library* library = device_->newLibrary(NS::String::string(k.source, NS::UTF8StringEncoding), options.get(), &error);
        if (library == nullptr) {
            qk::detail::fail("qk::backend::metal: the embedded ", k.source_name, ".metal did not compile on ", name_, ": ",
                             detail::describe(error));
        }
        return libraries_.emplace(std::string(k.source_name), detail::owned<MTL::Library>(library)).first->second.get();
    }

    detail::owned<MTL::Device> device_;
    detail::owned<MTL::CommandQueue> queue_;
    std::string name_;
    std::size_t max_threadgroup_memory_ = 0;
    std::size_t max_buffer_bytes_ = 0;
    mutable std::mutex mutex_;
    mutable std::mutex queue_mutex_;
    mutable std::map<std::string, detail::owned<MTL::Library>, std::less<>> libraries_;
    mutable std::map<key_type, detail::owned<MTL::ComputePipelineState>> pipelines_;
};

} // namespace qk::backend::metal
