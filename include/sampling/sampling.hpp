// Token sampling: every sampler, chains (built in code or parsed from a string) and batched
// sampling. Included by qkern.hpp; include this alone for sampling without the kernels.
#pragma once

#include "batch.hpp"
#include "candidates.hpp"
#include "chain.hpp"
#include "deterministic_math.hpp"
#include "parameters.hpp"
#include "random.hpp"
#include "sampler.hpp"
#include "token_data.hpp"
#include "vocabulary_scan.hpp"
