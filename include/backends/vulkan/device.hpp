// qk::backend::vulkan::device: one Vulkan device, set up once in its constructor (instance,
// device selection, the facts kernels size themselves by), with buffers, pipelines created lazily
// and cached per (kernel, specialization constants), and submission that waits on a fence.
// Thread-safe: any number of threads may share one device (see the locking notes below).
// Needs the Vulkan headers and loader: include it only with QKERN_ENABLE_VULKAN (vulkan.hpp does).
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
#include <utility>
#include <vector>

#include <vulkan/vulkan.h>

#include "../../kernels/error.hpp"
#include "../gpu/device_index.hpp"
#include "architecture.hpp"

namespace qk::backend::vulkan {

// A compute shader as the generated headers embed it: SPIR-V words, the number of storage buffers
// it binds (set 0, bindings 0 .. buffers-1) and the size of its push constants.
struct kernel {
    std::string_view name;
    std::span<const std::uint32_t> code;
    std::uint32_t buffers;
    std::uint32_t push_constant_bytes;
};

struct memory_heap {
    std::uint64_t bytes;
    bool device_local;
};

// What the device is and can do, read once at set-up and immutable afterwards.
struct device_facts {
    std::uint32_t index = 0; // among the instance's physical devices
    std::string name;
    std::uint32_t vendor_id = 0;
    std::uint32_t device_id = 0;
    VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
    std::string driver_name;
    std::string driver_info;
    std::uint32_t api_version = 0;
    std::uint32_t driver_version = 0;
    std::vector<memory_heap> heaps;
    std::uint32_t subgroup_size = 0;
    std::uint32_t min_subgroup_size = 0;
    std::uint32_t max_subgroup_size = 0;
    bool int8_storage = false;     // storageBuffer8BitAccess
    bool int8_arithmetic = false;  // shaderInt8
    bool fp16_storage = false;     // storageBuffer16BitAccess
    bool fp16_arithmetic = false;  // shaderFloat16
    bool fp64_arithmetic = false;  // shaderFloat64: the exact sampling kernels need it
    std::uint32_t shared_memory_bytes = 0;
    std::uint32_t push_constant_bytes = 0;
    std::uint32_t max_workgroup_invocations = 0;
    std::uint32_t max_workgroup_count_x = 0;
    std::uint64_t max_storage_buffer_bytes = 0;
    architecture_facts classified_from;
    architecture arch = architecture::other;
};

[[nodiscard]] inline std::string_view type_name(VkPhysicalDeviceType t) noexcept
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

namespace detail {

[[nodiscard]] inline const char* result_name(VkResult r) noexcept
{
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default: return "VkResult";
    }
}

inline void check(VkResult r, const char* call)
{
    if (r != VK_SUCCESS) {
        qk::detail::fail("qk::backend::vulkan: ", call, " failed: ", result_name(r), " (", static_cast<int>(r), ")");
    }
}

[[nodiscard]] inline bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) noexcept
{
    for (const auto& e : list) {
        if (std::strcmp(e.extensionName, name) == 0) {
            return true;
        }
    }
    return false;
}

// Owns a VkInstance (destroyed last, after every device object made from it).
class instance {
public:
    instance()
    {
        VkApplicationInfo app{};
        app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
        app.pApplicationName = "qkern";
        app.pEngineName = "qkern";
        app.apiVersion = VK_API_VERSION_1_1;
        VkInstanceCreateInfo info{};
        info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
        info.pApplicationInfo = &app;
        check(vkCreateInstance(&info, nullptr, &handle_), "vkCreateInstance");
    }
    instance(const instance&) = delete;
    instance& operator=(const instance&) = delete;
    ~instance() { vkDestroyInstance(handle_, nullptr); }

    [[nodiscard]] VkInstance get() const noexcept { return handle_; }

    [[nodiscard]] std::vector<VkPhysicalDevice> physical_devices() const
    {
        std::uint32_t count = 0;
        check(vkEnumeratePhysicalDevices(handle_, &count, nullptr), "vkEnumeratePhysicalDevices");
        std::vector<VkPhysicalDevice> list(count);
        check(vkEnumeratePhysicalDevices(handle_, &count, list.data()), "vkEnumeratePhysicalDevices");
        list.resize(count);
        return list;
    }

private:
    VkInstance handle_ = VK_NULL_HANDLE;
};

[[nodiscard]] inline device_facts read_facts(VkPhysicalDevice pd, std::uint32_t index)
{
    device_facts f;
    f.index = index;
    std::uint32_t count = 0;
    check(vkEnumerateDeviceExtensionProperties(pd, nullptr, &count, nullptr), "vkEnumerateDeviceExtensionProperties");
    std::vector<VkExtensionProperties> extensions(count);
    check(vkEnumerateDeviceExtensionProperties(pd, nullptr, &count, extensions.data()), "vkEnumerateDeviceExtensionProperties");
    extensions.resize(count);

    VkPhysicalDeviceProperties base{};
    vkGetPhysicalDeviceProperties(pd, &base);
    const bool v12 = base.apiVersion >= VK_API_VERSION_1_2;

    // The property chain: only structures the device knows (by version or extension) are linked.
    VkPhysicalDeviceProperties2 props{};
    props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    VkPhysicalDeviceSubgroupProperties subgroup{};
    subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    props.pNext = &subgroup;
    void** tail = &subgroup.pNext;
    VkPhysicalDeviceDriverProperties driver{};
    driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    if (v12 || has_extension(extensions, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME)) {
        *tail = &driver;
        tail = &driver.pNext;
    }
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT size_control{};
    size_control.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT;
    if (base.apiVersion >= VK_API_VERSION_1_3 || has_extension(extensions, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) {
        *tail = &size_control;
        tail = &size_control.pNext;
    }
    VkPhysicalDeviceShaderCorePropertiesAMD amd{};
    amd.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD;
    if (has_extension(extensions, VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) {
        *tail = &amd;
        tail = &amd.pNext;
    }
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{};
    sm.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV;
    if (has_extension(extensions, VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
        *tail = &sm;
        tail = &sm.pNext;
    }
    VkPhysicalDeviceShaderIntegerDotProductProperties dot{};
    dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES;
    if (base.apiVersion >= VK_API_VERSION_1_3 || has_extension(extensions, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) {
        *tail = &dot;
        tail = &dot.pNext;
    }
    vkGetPhysicalDeviceProperties2(pd, &props);

    VkPhysicalDeviceFeatures2 features{};
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    VkPhysicalDevice16BitStorageFeatures storage16{};
    storage16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    features.pNext = &storage16;
    VkPhysicalDevice8BitStorageFeatures storage8{};
    storage8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES;
    VkPhysicalDeviceShaderFloat16Int8Features float16_int8{};
    float16_int8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    if (v12 || has_extension(extensions, VK_KHR_8BIT_STORAGE_EXTENSION_NAME)) {
        storage16.pNext = &storage8;
    }
    if (v12 || has_extension(extensions, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME)) {
        storage8.pNext = &float16_int8;
    }
    vkGetPhysicalDeviceFeatures2(pd, &features);

    const auto& p = props.properties;
    f.name = p.deviceName;
    f.vendor_id = p.vendorID;
    f.device_id = p.deviceID;
    f.type = p.deviceType;
    f.api_version = p.apiVersion;
    f.driver_version = p.driverVersion;
    f.driver_name = driver.driverName;
    f.driver_info = driver.driverInfo;
    f.subgroup_size = subgroup.subgroupSize;
    f.min_subgroup_size = size_control.minSubgroupSize != 0 ? size_control.minSubgroupSize : subgroup.subgroupSize;
    f.max_subgroup_size = size_control.maxSubgroupSize != 0 ? size_control.maxSubgroupSize : subgroup.subgroupSize;
    f.int8_storage = storage8.storageBuffer8BitAccess == VK_TRUE;
    f.int8_arithmetic = float16_int8.shaderInt8 == VK_TRUE;
    f.fp16_storage = storage16.storageBuffer16BitAccess == VK_TRUE;
    f.fp16_arithmetic = float16_int8.shaderFloat16 == VK_TRUE;
    f.fp64_arithmetic = features.features.shaderFloat64 == VK_TRUE;
    f.shared_memory_bytes = p.limits.maxComputeSharedMemorySize;
    f.push_constant_bytes = p.limits.maxPushConstantsSize;
    f.max_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
    f.max_workgroup_count_x = p.limits.maxComputeWorkGroupCount[0];
    f.max_storage_buffer_bytes = p.limits.maxStorageBufferRange;

    VkPhysicalDeviceMemoryProperties memory{};
    vkGetPhysicalDeviceMemoryProperties(pd, &memory);
    for (std::uint32_t h = 0; h < memory.memoryHeapCount; ++h) {
        f.heaps.push_back({memory.memoryHeaps[h].size, (memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});
    }

    architecture_facts& a = f.classified_from;
    a.vendor_id = f.vendor_id;
    a.min_subgroup_size = f.min_subgroup_size;
    a.max_subgroup_size = f.max_subgroup_size;
    a.wavefronts_per_simd = amd.wavefrontsPerSimd;
    a.integer_dot_product = dot.integerDotProduct4x8BitPackedMixedSignednessAccelerated == VK_TRUE;
    a.cooperative_matrix = has_extension(extensions, "VK_KHR_cooperative_matrix") || has_extension(extensions, "VK_NV_cooperative_matrix");
    a.warps_per_sm = sm.shaderWarpsPerSM;
    f.arch = classify(a);
    return f;
}

// The device an index picks (negative: QKERN_VULKAN_DEVICE if set, else the first discrete GPU,
// else device 0). An index that names no device is a qk::error.
[[nodiscard]] inline std::uint32_t pick_device(const std::vector<VkPhysicalDevice>& list, int index)
{
    if (list.empty()) {
        qk::detail::fail("qk::backend::vulkan: no Vulkan device is available");
    }
    if (index < 0) {
        index = gpu::device_index_from_environment("QKERN_VULKAN_DEVICE", "vulkan");
    }
    if (index >= 0) {
        if (static_cast<std::size_t>(index) >= list.size()) {
            qk::detail::fail("qk::backend::vulkan: device index ", index, " is out of range: there are ", list.size(),
                             " Vulkan devices");
        }
        return static_cast<std::uint32_t>(index);
    }
    for (std::uint32_t i = 0; i < list.size(); ++i) {
        VkPhysicalDeviceProperties p{};
        vkGetPhysicalDeviceProperties(list[i], &p);
        if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) {
            return i;
        }
    }
    return 0;
}

} // namespace detail

// The facts of every Vulkan device on this machine (empty, not an error, where there is no
// loader driver or device: what `qk info` lists).
[[nodiscard]] inline std::vector<device_facts> list_devices()
{
    std::vector<device_facts> out;
    try {
        detail::instance inst;
        const auto list = inst.physical_devices();
        for (std::uint32_t i = 0; i < list.size(); ++i) {
            out.push_back(detail::read_facts(list[i], i));
        }
    } catch (const qk::error&) {
        out.clear();
    }
    return out;
}

class device;

// Storage in device memory. Host-visible memory (staging, and device-local memory that is also
// host-visible, as on integrated GPUs and lavapipe) stays mapped, and transfers copy directly.
class buffer {
public:
    buffer() = default;
    buffer(const buffer&) = delete;
    buffer& operator=(const buffer&) = delete;
    buffer(buffer&& o) noexcept { swap(o); }
    buffer& operator=(buffer&& o) noexcept
    {
        buffer moved(std::move(o));
        swap(moved);
        return *this;
    }
    ~buffer() { release(); }

    [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
    [[nodiscard]] VkBuffer get() const noexcept { return handle_; }
    [[nodiscard]] void* mapped() const noexcept { return mapped_; }
    [[nodiscard]] explicit operator bool() const noexcept { return handle_ != VK_NULL_HANDLE; }

private:
    friend class device;

    void swap(buffer& o) noexcept
    {
        std::swap(device_, o.device_);
        std::swap(handle_, o.handle_);
        std::swap(memory_, o.memory_);
        std::swap(mapped_, o.mapped_);
        std::swap(bytes_, o.bytes_);
    }
    void release() noexcept
    {
        if (device_ != VK_NULL_HANDLE) {
            if (mapped_ != nullptr) {
                vkUnmapMemory(device_, memory_);
            }
            vkDestroyBuffer(device_, handle_, nullptr);
            vkFreeMemory(device_, memory_, nullptr);
        }
        device_ = VK_NULL_HANDLE;
        handle_ = VK_NULL_HANDLE;
        memory_ = VK_NULL_HANDLE;
        mapped_ = nullptr;
        bytes_ = 0;
    }

    VkDevice device_ = VK_NULL_HANDLE;
    VkBuffer handle_ = VK_NULL_HANDLE;
    VkDeviceMemory memory_ = VK_NULL_HANDLE;
    void* mapped_ = nullptr;
    std::size_t bytes_ = 0;
};

enum class memory_kind {
    device,  // device-local: where kernels read and write
    staging, // host-visible and coherent: transfers, and small per-step inputs
};

// One kernel launch of a run: the pipeline (kernel + specialization constants, constant 0 is the
// workgroup size), its buffers in binding order, push constants and the workgroup counts.
struct step {
    const kernel* what;
    std::vector<std::uint32_t> specialization;
    std::vector<const buffer*> buffers;
    std::vector<std::uint32_t> push;
    std::uint32_t groups_x = 1;
    std::uint32_t groups_y = 1;
    std::uint32_t groups_z = 1;
};

// Locking: the pipeline cache has its own mutex (building a pipeline does not block submissions);
// the queue, the command pool and the staging buffer share one, held for a whole run or transfer.
// Buffers are created without a lock (Vulkan allows it). Facts are immutable after construction.
class device {
public:
    // index < 0: QKERN_VULKAN_DEVICE if set, else the first discrete GPU, else the first device.
    explicit device(int index = -1)
    {
        instance_ = std::make_unique<detail::instance>();
        const auto list = instance_->physical_devices();
        const std::uint32_t chosen = detail::pick_device(list, index);
        physical_ = list[chosen];
        facts_ = detail::read_facts(physical_, chosen);
        vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

        std::uint32_t families = 0;
        vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, nullptr);
        std::vector<VkQueueFamilyProperties> family(families);
        vkGetPhysicalDeviceQueueFamilyProperties(physical_, &families, family.data());
        queue_family_ = families;
        for (std::uint32_t i = 0; i < families; ++i) {
            if ((family[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0) {
                queue_family_ = i;
                break;
            }
        }
        if (queue_family_ == families) {
            qk::detail::fail("qk::backend::vulkan: device ", chosen, " (", facts_.name, ") has no compute queue");
        }
        const float priority = 1.0f;
        VkDeviceQueueCreateInfo queue_info{};
        queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
        queue_info.queueFamilyIndex = queue_family_;
        queue_info.queueCount = 1;
        queue_info.pQueuePriorities = &priority;
        VkPhysicalDeviceFeatures enabled{};
        enabled.shaderFloat64 = facts_.fp64_arithmetic ? VK_TRUE : VK_FALSE;
        VkDeviceCreateInfo info{};
        info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
        info.queueCreateInfoCount = 1;
        info.pQueueCreateInfos = &queue_info;
        info.pEnabledFeatures = &enabled;
        detail::check(vkCreateDevice(physical_, &info, nullptr, &device_), "vkCreateDevice");
        vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

        VkCommandPoolCreateInfo pool{};
        pool.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
        pool.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pool.queueFamilyIndex = queue_family_;
        check_or_destroy(vkCreateCommandPool(device_, &pool, nullptr, &command_pool_), "vkCreateCommandPool");
        VkCommandBufferAllocateInfo alloc{};
        alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
        alloc.commandPool = command_pool_;
        alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        alloc.commandBufferCount = 1;
        check_or_destroy(vkAllocateCommandBuffers(device_, &alloc, &commands_), "vkAllocateCommandBuffers");
        VkFenceCreateInfo fence{};
        fence.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
        check_or_destroy(vkCreateFence(device_, &fence, nullptr, &fence_), "vkCreateFence");
    }

    device(const device&) = delete;
    device& operator=(const device&) = delete;
    ~device() { destroy(); }

    [[nodiscard]] const device_facts& facts() const noexcept { return facts_; }

    // A buffer of `bytes` (at least 4: Vulkan has no empty buffers).
    [[nodiscard]] buffer make_buffer(std::size_t bytes, memory_kind kind = memory_kind::device) const
    {
        const std::size_t size = bytes < 4 ? 4 : (bytes + 3) / 4 * 4;
        if (size > facts_.max_storage_buffer_bytes && kind == memory_kind::device) {
            qk::detail::fail("qk::backend::vulkan: a buffer of ", bytes, " bytes exceeds the device's largest storage buffer (",
                             facts_.max_storage_buffer_bytes, " bytes)");
        }
        buffer b;
        b.device_ = device_;
        b.bytes_ = size;
        VkBufferCreateInfo info{};
        info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        info.size = size;
        info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        detail::check(vkCreateBuffer(device_, &info, nullptr, &b.handle_), "vkCreateBuffer");
        VkMemoryRequirements need{};
        vkGetBufferMemoryRequirements(device_, b.handle_, &need);
        const VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
        std::uint32_t type = kind == memory_kind::device
                                 ? find_memory(need.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host)
                                 : find_memory(need.memoryTypeBits, host);
        if (type == no_memory && kind == memory_kind::device) {
            type = find_memory(need.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        }
        if (type == no_memory) {
            type = find_memory(need.memoryTypeBits, 0);
        }
        VkMemoryAllocateInfo alloc{};
        alloc.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        alloc.allocationSize = need.size;
        alloc.memoryTypeIndex = type;
        detail::check(vkAllocateMemory(device_, &alloc, nullptr, &b.memory_), "vkAllocateMemory");
        detail::check(vkBindBufferMemory(device_, b.handle_, b.memory_, 0), "vkBindBufferMemory");
        if ((memory_.memoryTypes[type].propertyFlags & host) == host) {
            detail::check(vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &b.mapped_), "vkMapMemory");
        }
        return b;
    }

    // Host -> buffer at byte `offset`, complete when this returns.
    void upload(const buffer& to, const void* from, std::size_t bytes, std::size_t offset = 0) const
    {
        check_range("upload", to, bytes, offset);
        if (bytes == 0) {
            return;
        }
        if (to.mapped() != nullptr) {
            std::memcpy(static_cast<char*>(to.mapped()) + offset, from, bytes);
            return;
        }
        const std::lock_guard lock(queue_mutex_);
        const buffer& stage = staging(bytes);
        std::memcpy(stage.mapped(), from, bytes);
        copy(stage, 0, to, offset, bytes);
    }

    // Buffer at byte `offset` -> host, after every run submitted before it has finished.
    void download(const buffer& from, void* to, std::size_t bytes, std::size_t offset = 0) const
    {
        check_range("download", from, bytes, offset);
        if (bytes == 0) {
            return;
        }
        if (from.mapped() != nullptr) {
            const std::lock_guard lock(queue_mutex_); // runs complete under this lock
            std::memcpy(to, static_cast<const char*>(from.mapped()) + offset, bytes);
            return;
        }
        const std::lock_guard lock(queue_mutex_);
        const buffer& stage = staging(bytes);
        copy(from, offset, stage, 0, bytes);
        std::memcpy(to, stage.mapped(), bytes);
    }

    // Records the steps in order, each one's writes visible to the next, submits them and waits.
    void run(std::span<const step> steps) const
    {
        std::vector<std::pair<const step*, const pipeline*>> resolved;
        std::uint32_t descriptors = 0;
        for (const step& s : steps) {
            if (s.buffers.size() != s.what->buffers || s.push.size() * 4 != s.what->push_constant_bytes) {
                qk::detail::fail("qk::backend::vulkan: kernel ", s.what->name, " takes ", s.what->buffers, " buffers and ",
                                 s.what->push_constant_bytes, " bytes of push constants, given ", s.buffers.size(), " and ",
                                 s.push.size() * 4);
            }
            if (s.groups_x > facts_.max_workgroup_count_x) {
                qk::detail::fail("qk::backend::vulkan: kernel ", s.what->name, ": ", s.groups_x,
                                 " workgroups exceed the device's limit of ", facts_.max_workgroup_count_x);
            }
            resolved.emplace_back(&s, &pipeline_for(*s.what, s.specialization));
            descriptors += s.what->buffers;
        }
        if (resolved.empty()) {
            return;
        }
        const std::lock_guard lock(queue_mutex_);
        VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptors == 0 ? 1 : descriptors};
        VkDescriptorPoolCreateInfo pool_info{};
        pool_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
        pool_info.maxSets = static_cast<std::uint32_t>(resolved.size());
        pool_info.poolSizeCount = 1;
        pool_info.pPoolSizes = &size;
        VkDescriptorPool pool = VK_NULL_HANDLE;
        detail::check(vkCreateDescriptorPool(device_, &pool_info, nullptr, &pool), "vkCreateDescriptorPool");
        struct pool_guard {
            VkDevice d;
            VkDescriptorPool p;
            ~pool_guard() { vkDestroyDescriptorPool(d, p, nullptr); }
        } guard{device_, pool};

        begin();
        for (std::size_t i = 0; i < resolved.size(); ++i) {
            const step& s = *resolved[i].first;
            const pipeline& p = *resolved[i].second;
            VkDescriptorSetAllocateInfo alloc{};
            alloc.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
            alloc.descriptorPool = pool;
            alloc.descriptorSetCount = 1;
            alloc.pSetLayouts = &p.set_layout;
            VkDescriptorSet set = VK_NULL_HANDLE;
            detail::check(vkAllocateDescriptorSets(device_, &alloc, &set), "vkAllocateDescriptorSets");
            std::vector<VkDescriptorBufferInfo> infos(s.buffers.size());
            std::vector<VkWriteDescriptorSet> writes(s.buffers.size());
            for (std::size_t b = 0; b < s.buffers.size(); ++b) {
                infos[b] = {s.buffers[b]->get(), 0, VK_WHOLE_SIZE};
                writes[b].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
                writes[b].dstSet = set;
                writes[b].dstBinding = static_cast<std::uint32_t>(b);
                writes[b].descriptorCount = 1;
                writes[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
                writes[b].pBufferInfo = &infos[b];
            }
            vkUpdateDescriptorSets(device_, static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
            if (i > 0) {
                VkMemoryBarrier barrier{};
                barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
                barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
                barrier.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
                vkCmdPipelineBarrier(commands_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                                     &barrier, 0, nullptr, 0, nullptr);
            }
            vkCmdBindPipeline(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, p.handle);
            vkCmdBindDescriptorSets(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
            if (!s.push.empty()) {
                vkCmdPushConstants(commands_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                                   static_cast<std::uint32_t>(s.push.size() * 4), s.push.data());
            }
            vkCmdDispatch(commands_, s.groups_x, s.groups_y, s.groups_z);
        }
        VkMemoryBarrier to_host{};
        to_host.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
        to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
        vkCmdPipelineBarrier(commands_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &to_host, 0, nullptr, 0, nullptr);
        submit_and_wait();
    }

    void run(const step& s) const { run(std::span<const step>(&s, 1)); }

    // How many pipelines have been built (each (kernel, specialization) once).
    [[nodiscard]] std::size_t pipelines_built() const
    {
        const std::lock_guard lock(pipeline_mutex_);
        return pipelines_.size();
    }

private:
    static constexpr std::uint32_t no_memory = ~0u;

    struct pipeline {
        VkShaderModule module = VK_NULL_HANDLE;
        VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
        VkPipelineLayout layout = VK_NULL_HANDLE;
        VkPipeline handle = VK_NULL_HANDLE;
    };
    using pipeline_key = std::pair<const std::uint32_t*, std::vector<std::uint32_t>>;

    void check_or_destroy(VkResult r, const char* call)
    {
        if (r != VK_SUCCESS) {
            destroy();
            detail::check(r, call);
        }
    }

    void destroy() noexcept
    {
        if (device_ != VK_NULL_HANDLE) {
            vkDeviceWaitIdle(device_);
            for (auto& [key, p] : pipelines_) {
                vkDestroyPipeline(device_, p->handle, nullptr);
                vkDestroyPipelineLayout(device_, p->layout, nullptr);
                vkDestroyDescriptorSetLayout(device_, p->set_layout, nullptr);
                vkDestroyShaderModule(device_, p->module, nullptr);
            }
            pipelines_.clear();
            staging_ = buffer();
            if (fence_ != VK_NULL_HANDLE) {
                vkDestroyFence(device_, fence_, nullptr);
            }
            if (command_pool_ != VK_NULL_HANDLE) {
                vkDestroyCommandPool(device_, command_pool_, nullptr);
            }
            vkDestroyDevice(device_, nullptr);
            device_ = VK_NULL_HANDLE;
        }
        instance_.reset();
    }

    [[nodiscard]] std::uint32_t find_memory(std::uint32_t allowed, VkMemoryPropertyFlags wanted) const noexcept
    {
        for (std::uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
            if ((allowed & (1u << i)) != 0 && (memory_.memoryTypes[i].propertyFlags & wanted) == wanted) {
                return i;
            }
        }
        return no_memory;
    }

    static void check_range(const char* what, const buffer& b, std::size_t bytes, std::size_t offset)
    {
        if (offset > b.size() || bytes > b.size() - offset) {
            qk::detail::fail("qk::backend::vulkan::device::", what, ": ", bytes, " bytes at offset ", offset, " exceed the buffer's ",
                             b.size(), " bytes");
        }
    }

    // Called with queue_mutex_ held.
    const buffer& staging(std::size_t bytes) const
    {
        if (staging_.size() < bytes) {
            staging_ = buffer();
            staging_ = make_buffer(bytes, memory_kind::staging);
        }
        return staging_;
    }

    void begin() const
    {
        detail::check(vkResetCommandBuffer(commands_, 0), "vkResetCommandBuffer");
        VkCommandBufferBeginInfo info{};
        info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        info.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        detail::check(vkBeginCommandBuffer(commands_, &info), "vkBeginCommandBuffer");
    }

    void submit_and_wait() const
    {
        detail::check(vkEndCommandBuffer(commands_), "vkEndCommandBuffer");
        VkSubmitInfo submit{};
        submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
        submit.commandBufferCount = 1;
        submit.pCommandBuffers = &commands_;
        detail::check(vkResetFences(device_, 1, &fence_), "vkResetFences");
        detail::check(vkQueueSubmit(queue_, 1, &submit, fence_), "vkQueueSubmit");
        detail::check(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    }

    // Called with queue_mutex_ held.
    void copy(const buffer& from, std::size_t from_offset, const buffer& to, std::size_t to_offset, std::size_t bytes) const
    {
        begin();
        const VkBufferCopy region{from_offset, to_offset, bytes};
        vkCmdCopyBuffer(commands_, from.get(), to.get(), 1, &region);
        VkMemoryBarrier barrier{};
        barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
        barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT;
        vkCmdPipelineBarrier(commands_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                             0, 1, &barrier, 0, nullptr, 0, nullptr);
        submit_and_wait();
    }

    const pipeline& pipeline_for(const kernel& k, const std::vector<std::uint32_t>& specialization) const
    {
        const std::lock_guard lock(pipeline_mutex_);
        pipeline_key key{k.code.data(), specialization};
        if (const auto it = pipelines_.find(key); it != pipelines_.end()) {
            return *it->second;
        }
        auto p = std::make_unique<pipeline>();
        struct partial_guard { // destroys what was built if a later step throws
            VkDevice d;
            pipeline* p;
            bool done = false;
            ~partial_guard()
            {
                if (!done) {
                    vkDestroyPipelineLayout(d, p->layout, nullptr);
                    vkDestroyDescriptorSetLayout(d, p->set_layout, nullptr);
                    vkDestroyShaderModule(d, p->module, nullptr);
                }
            }
        } guard{device_, p.get()};

        VkShaderModuleCreateInfo module{};
        module.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
        module.codeSize = k.code.size() * 4;
        module.pCode = k.code.data();
        detail::check(vkCreateShaderModule(device_, &module, nullptr, &p->module), "vkCreateShaderModule");

        std::vector<VkDescriptorSetLayoutBinding> bindings(k.buffers);
        for (std::uint32_t b = 0; b < k.buffers; ++b) {
            bindings[b] = {b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
        }
        VkDescriptorSetLayoutCreateInfo set{};
        set.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
        set.bindingCount = k.buffers;
        set.pBindings = bindings.data();
        detail::check(vkCreateDescriptorSetLayout(device_, &set, nullptr, &p->set_layout), "vkCreateDescriptorSetLayout");

        const VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, k.push_constant_bytes};
        VkPipelineLayoutCreateInfo layout{};
        layout.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
        layout.setLayoutCount = 1;
        layout.pSetLayouts = &p->set_layout;
        layout.pushConstantRangeCount = k.push_constant_bytes > 0 ? 1 : 0;
        layout.pPushConstantRanges = &range;
        detail::check(vkCreatePipelineLayout(device_, &layout, nullptr, &p->layout), "vkCreatePipelineLayout");

        std::vector<VkSpecializationMapEntry> entries(specialization.size());
        for (std::uint32_t i = 0; i < entries.size(); ++i) {
            entries[i] = {i, i * 4, 4};
        }
        VkSpecializationInfo spec{};
        spec.mapEntryCount = static_cast<std::uint32_t>(entries.size());
        spec.pMapEntries = entries.data();
        spec.dataSize = specialization.size() * 4;
        spec.pData = specialization.data();
        VkComputePipelineCreateInfo info{};
        info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
        info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
        info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
        info.stage.module = p->module;
        info.stage.pName = "main";
        info.stage.pSpecializationInfo = entries.empty() ? nullptr : &spec;
        info.layout = p->layout;
        detail::check(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &p->handle), "vkCreateComputePipelines");
        guard.done = true;
        return *pipelines_.emplace(std::move(key), std::move(p)).first->second;
    }

    std::unique_ptr<detail::instance> instance_;
    VkPhysicalDevice physical_ = VK_NULL_HANDLE;
    device_facts facts_;
    VkPhysicalDeviceMemoryProperties memory_{};
    std::uint32_t queue_family_ = 0;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    VkCommandPool command_pool_ = VK_NULL_HANDLE;
    VkCommandBuffer commands_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;

    mutable std::mutex queue_mutex_;
    mutable buffer staging_;
    mutable std::mutex pipeline_mutex_;
    mutable std::map<pipeline_key, std::unique_ptr<pipeline>> pipelines_;
};

} // namespace qk::backend::vulkan
