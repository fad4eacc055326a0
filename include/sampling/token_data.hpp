// One sampling candidate: a token id with its logit and, once a sampler has computed them over
// the candidate set, its probability. The element type of every candidate list qkern returns.
#pragma once

#include <cstdint>

namespace qk::sampling {

struct token_data {
    std::int32_t id;
    float logit;
    float p; // probability within the candidate set; meaningful only where a function says so

    friend bool operator==(const token_data&, const token_data&) = default;
};

} // namespace qk::sampling
