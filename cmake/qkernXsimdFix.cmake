# Debian's libxsimd-dev 8.1 exports the target `xsimd` with INTERFACE_LINK_LIBRARIES "xtl", but its
# package config never looks for xtl (and libxtl-dev is not a dependency), so every program linking
# `xsimd` gets a bogus `-lxtl` and fails to link. xsimd needs xtl only for XSIMD_ENABLE_XTL_COMPLEX,
# which qkern does not use: drop the dangling name when no `xtl` target exists.
# Used by qkern's own build and by the installed qkernConfig.cmake.
if(TARGET xsimd AND NOT TARGET xtl)
    get_target_property(_qkern_xsimd_links xsimd INTERFACE_LINK_LIBRARIES)
    if(_qkern_xsimd_links)
        list(REMOVE_ITEM _qkern_xsimd_links xtl)
        set_target_properties(xsimd PROPERTIES INTERFACE_LINK_LIBRARIES "${_qkern_xsimd_links}")
    endif()
    unset(_qkern_xsimd_links)
endif()
