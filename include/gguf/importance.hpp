// qk::gguf::importance_matrix: the per-column importance weights ("imatrix") that llama.cpp's
// llama-imatrix collects, read from either of the files it writes: its GGUF form (a tensor pair
// `<weight>.in_sum2` and `<weight>.counts` per weight) or the legacy `.dat` form. The weights are
// what llama-quantize hands ggml_quantize_chunk, computed the same way, so that IQ4_NL and IQ4_XS
// quantized with them are byte for byte what llama.cpp writes (see quantize.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../kernels/error.hpp"
#include "file.hpp"

namespace qk::gguf {

class importance_matrix {
public:
    // Reads `path`: a GGUF file (by its magic) or else the legacy form. A malformed file, an entry
    // whose sums and counts disagree in size, a non-F32 entry or a value that is not finite and
    // non-negative: qk::error naming the file and the entry.
    explicit importance_matrix(const std::string& path)
    try : path_(path)
    {
        const detail::mapping bytes(path);
        read(bytes.bytes());
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::importance_matrix");
    }
    // The same from bytes in memory; `name` stands for the path in messages and in
    // quantize.imatrix.file.
    importance_matrix(std::span<const std::byte> bytes, std::string name)
    try : path_(std::move(name))
    {
        read(bytes);
    } catch (...) {
        qk::detail::rethrow_as_error("qk::gguf::importance_matrix");
    }

    // The weights for the tensor called `name`: one per column for each of its matrices (a 3-D
    // expert tensor has one set per expert, back to back); nullptr when the file has none.
    [[nodiscard]] const std::vector<float>* find(std::string_view name) const
    {
        const auto it = weights_.find(std::string(name));
        return it == weights_.end() ? nullptr : &it->second;
    }
    [[nodiscard]] std::size_t size() const noexcept { return weights_.size(); }
    [[nodiscard]] const std::string& path() const noexcept { return path_; }
    [[nodiscard]] const std::vector<std::string>& datasets() const noexcept { return datasets_; }
    [[nodiscard]] std::uint32_t chunk_count() const noexcept { return chunk_count_; }
    [[nodiscard]] bool legacy() const noexcept { return legacy_; }

private:
    void read(std::span<const std::byte> all)
    {
        if (all.size() >= 4 && std::memcmp(all.data(), "GGUF", 4) == 0) {
            read_gguf(file(all));
        } else {
            read_legacy(all);
        }
        for (const auto& [name, weights] : weights_) {
            for (std::size_t i = 0; i < weights.size(); ++i) {
                if (!std::isfinite(weights[i]) || weights[i] < 0.0f) {
                    fail("entry '", name, "' has weight ", weights[i], " at column ", i, "; weights must be finite and non-negative");
                }
            }
        }
    }

    template <class... Parts>
    [[noreturn]] void fail(const Parts&... parts) const
    {
        qk::detail::fail("qk::gguf::importance_matrix: ", path_, ": ", parts...);
    }

    // llama-imatrix's GGUF form: for each weight W, F32 tensors W.in_sum2 (the sums of squared
    // activations, one per column and matrix) and W.counts (how many activations each matrix
    // saw). The weight is sum / count, and 1 where a matrix saw none (an expert never routed).
    void read_gguf(const file& f)
    {
        legacy_ = false;
        if (const auto d = f.find("imatrix.datasets"); d != nullptr && d->is_array() && d->element_type() == value_type::string) {
            datasets_ = std::get<std::vector<std::string>>(std::get<gguf::array>(d->data));
        }
        if (const auto c = f.find("imatrix.chunk_count"); c != nullptr && !c->is_array() && c->type() == value_type::uint32) {
            chunk_count_ = std::get<std::uint32_t>(std::get<gguf::scalar>(c->data));
        }
        constexpr std::string_view sums_suffix = ".in_sum2";
        constexpr std::string_view counts_suffix = ".counts";
        // By name through a map: a search per entry would be quadratic in a hostile file's tensors.
        std::unordered_map<std::string_view, const tensor_info*> by_name;
        for (const tensor_info& t : f.tensors()) {
            by_name.emplace(t.name, &t);
        }
        for (const tensor_info& sums : f.tensors()) {
            const std::string_view name = sums.name;
            if (name.size() <= sums_suffix.size() || !name.ends_with(sums_suffix)) {
                continue;
            }
            const std::string weight(name.substr(0, name.size() - sums_suffix.size()));
            const auto found = by_name.find(weight + std::string(counts_suffix));
            const tensor_info* counts = found == by_name.end() ? nullptr : found->second;
            if (counts == nullptr) {
                fail("'", sums.name, "' has no '", weight, counts_suffix, "' beside it");
            }
            if (sums.type != type_f32 || counts->type != type_f32) {
                fail("'", sums.name, "' is ", sums.type_info().name, " and '", counts->name, "' is ", counts->type_info().name,
                     "; both must be f32");
            }
            const std::vector<float> s = f.floats(sums);
            const std::vector<float> c = f.floats(*counts);
            if (c.empty() || s.empty() || s.size() % c.size() != 0) {
                fail("'", sums.name, "' holds ", s.size(), " sums for ", c.size(), " counts: not a whole number of columns per count");
            }
            const std::size_t columns = s.size() / c.size();
            std::vector<float> w(s.size());
            for (std::size_t m = 0; m < c.size(); ++m) {
                if (!std::isfinite(c[m]) || c[m] < 0.0f) {
                    fail("'", counts->name, "'[", m, "] is ", c[m], "; counts must be finite and non-negative");
                }
                // llama.cpp rounds the stored count to an integer and divides in float.
                const auto count = static_cast<float>(std::lround(c[m]));
                for (std::size_t i = 0; i < columns; ++i) {
                    w[m * columns + i] = count > 0.0f ? s[m * columns + i] / count : 1.0f;
                }
            }
            weights_.emplace(weight, std::move(w));
        }
        if (weights_.empty()) {
            fail("a GGUF file without any '<weight>.in_sum2' tensor is not an importance matrix");
        }
    }

    // The legacy form, all little-endian: int32 entry count; per entry an int32 name length, the
    // name, int32 calls, int32 value count and the float sums; then optionally int32 chunks and
    // an int32-length dataset name. The weight is sum / calls (the sum itself when calls is 0).
    void read_legacy(std::span<const std::byte> all)
    {
        legacy_ = true;
        std::size_t at = 0;
        const auto int32 = [&](const char* what) {
            if (all.size() - at < 4) {
                fail("the file ends at byte ", at, " where ", what, " should be; it is neither GGUF nor a legacy imatrix");
            }
            std::int32_t v;
            std::memcpy(&v, all.data() + at, 4);
            at += 4;
            return v;
        };
        const std::int32_t entries = int32("the entry count");
        if (entries < 1) {
            fail("the entry count is ", entries, "; it is neither GGUF nor a legacy imatrix with data");
        }
        for (std::int32_t e = 0; e < entries; ++e) {
            const std::int32_t length = int32("a name length");
            if (length < 1 || static_cast<std::size_t>(length) > all.size() - at) {
                fail("entry ", e, ": a name of ", length, " bytes at byte ", at - 4, " does not fit in the file");
            }
            std::string name(reinterpret_cast<const char*>(all.data() + at), static_cast<std::size_t>(length));
            at += static_cast<std::size_t>(length);
            const std::int32_t calls = int32("a call count");
            const std::int32_t values = int32("a value count");
            if (values < 1 || static_cast<std::size_t>(values) > (all.size() - at) / 4) {
                fail("entry '", name, "': ", values, " values at byte ", at - 4, " do not fit in the file");
            }
            std::vector<float> w(static_cast<std::size_t>(values));
            std::memcpy(w.data(), all.data() + at, w.size() * 4);
            at += w.size() * 4;
            if (calls > 0) {
                for (float& v : w) {
                    v /= static_cast<float>(calls);
                }
            }
            if (!weights_.emplace(std::move(name), std::move(w)).second) {
                fail("entry ", e, " repeats an earlier entry's name");
            }
        }
        if (all.size() - at >= 4) {
            const std::int32_t chunks = int32("the chunk count");
            chunk_count_ = chunks > 0 ? static_cast<std::uint32_t>(chunks) : 0;
            if (all.size() - at >= 4) {
                const std::int32_t length = int32("the dataset name's length");
                if (length > 0 && static_cast<std::size_t>(length) <= all.size() - at) {
                    datasets_.emplace_back(reinterpret_cast<const char*>(all.data() + at), static_cast<std::size_t>(length));
                }
            }
        }
    }

    std::string path_;
    std::unordered_map<std::string, std::vector<float>> weights_;
    std::vector<std::string> datasets_;
    std::uint32_t chunk_count_ = 0;
    bool legacy_ = false;
};

} // namespace qk::gguf
