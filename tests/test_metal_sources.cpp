// The Metal host code's kernel table against the embedded MSL it will compile on an Apple
// machine: every kernel name is defined as a kernel function in its source, and every function
// constant it sets is declared there with that name, index and type. Metal cannot run on Linux,
// so this is what keeps the host code and the shaders from drifting apart here.
#include <doctest/doctest.h>

#include <backends/metal/kernels.hpp>

#include <regex>
#include <set>
#include <string>

namespace metal = qk::backend::metal;

namespace {

// The function constants a source declares: `constant TYPE NAME [[function_constant(INDEX)]];`.
struct declared {
    std::string type;
    std::string name;
    std::uint32_t index;
};

std::vector<declared> function_constants_in(const std::string& source)
{
    static const std::regex pattern(R"(constant\s+(\w+)\s+(\w+)\s*\[\[\s*function_constant\(\s*(\d+)\s*\)\s*\]\])");
    std::vector<declared> out;
    for (auto it = std::sregex_iterator(source.begin(), source.end(), pattern); it != std::sregex_iterator(); ++it) {
        out.push_back({(*it)[1], (*it)[2], static_cast<std::uint32_t>(std::stoul((*it)[3]))});
    }
    return out;
}

bool defines_kernel(const std::string& source, std::string_view name)
{
    const std::regex pattern("kernel\\s+void\\s+" + std::string(name) + "\\s*\\(");
    return std::regex_search(source, pattern);
}

} // namespace

TEST_CASE("metal sources: every kernel and function constant the host uses is in the embedded MSL")
{
    std::set<std::string> names;
    for (const metal::kernel_info* k : metal::kernels::all) {
        CAPTURE(k->name);
        CHECK(names.insert(std::string(k->name)).second); // listed once
        const std::string source = k->source;
        CHECK(source.find("#include <metal_stdlib>") != std::string::npos);
        CHECK(defines_kernel(source, k->name));
        const auto constants = function_constants_in(source);
        for (const metal::function_constant& c : k->constants) {
            CAPTURE(c.name);
            bool found = false;
            for (const declared& d : constants) {
                if (d.name == c.name) {
                    found = true;
                    CHECK(d.index == c.index);
                    CHECK(d.type == (c.type == metal::constant_type::boolean ? "bool" : "uint"));
                }
            }
            CHECK(found);
        }
        // Indices are unique within a source, so no two constants can be set through one index.
        std::set<std::uint32_t> indices;
        for (const declared& d : constants) {
            CHECK(indices.insert(d.index).second);
        }
    }
    CHECK(names.size() == 11);
}

TEST_CASE("metal sources: the embedded text is whole (the Metal runtime resolves no quoted #include)")
{
    // The generator pastes each quoted include (the generated constants) into the text; only
    // <metal_stdlib>, which the Metal compiler provides, stays an include.
    static const std::regex quoted_include(R"((^|\n)\s*#\s*include\s*")");
    for (const char* source : {metal::source::gemv, metal::source::sampling, metal::source::solve_tri}) {
        CHECK_FALSE(std::regex_search(std::string(source), quoted_include));
    }
    CHECK(std::string(metal::source::gemv).find("iq4_values[16]") != std::string::npos); // the pasted value tables
    CHECK(std::string(metal::source::sampling).find("result_words") != std::string::npos); // the pasted layout
}

TEST_CASE("metal sources: a kernel the host code set up wrongly would be caught")
{
    // The checks above can fail: a misspelt kernel, a wrong index and a wrong type are reported.
    const std::string source = metal::source::solve_tri;
    CHECK_FALSE(defines_kernel(source, "kernel_solve_tri_f16"));
    const auto constants = function_constants_in(source);
    REQUIRE(constants.size() == metal::kernels::solve_tri_constants.size());
    bool all_uint = true;
    for (const auto& d : constants) {
        all_uint = all_uint && d.type == "uint";
    }
    CHECK_FALSE(all_uint); // left/lower/unit are booleans
}
