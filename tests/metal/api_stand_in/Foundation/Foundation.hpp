// A declaration-only stand-in for the parts of metal-cpp's Foundation that qkern's Metal host
// code calls, with the signatures metal-cpp documents, so that the host code (Apple-only) is at
// least compiled on Linux: tests/metal/host_compiles.cpp. Nothing here is defined or run.
#pragma once

#include <cstddef>

namespace NS {

using UInteger = unsigned long;
enum StringEncoding : UInteger { UTF8StringEncoding = 4 };

class Object {
public:
    void release();
};

template <class T>
class Referencing : public Object {
public:
    T* retain();
};

class String : public Referencing<String> {
public:
    static String* string(const char* s, StringEncoding encoding);
    const char* utf8String() const;
};

class Error : public Referencing<Error> {
public:
    String* localizedDescription() const;
};

class Array : public Referencing<Array> {
public:
    UInteger count() const;
    template <class T>
    T* object(UInteger index) const;
};

} // namespace NS
