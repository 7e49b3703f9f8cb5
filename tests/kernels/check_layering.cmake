# The layering of src/kernels (docs/design.md 5.1), checked from the #include
# lines of its files: base/ includes only base/ and core/; layers/ only base/,
# layers/ and core/; attention/ anything in kernels/ and core/ (kernels know
# nothing of MPI, strategies or the model), and none the whole deck
# (core/config.hpp): the deck's words are in core/deck_words.hpp. Quoted includes are rooted at
# src/; system and library headers (<...>) are not checked.
#   cmake -DKERNELS_DIR=<src/kernels> -P check_layering.cmake
if(NOT KERNELS_DIR OR NOT IS_DIRECTORY "${KERNELS_DIR}")
  message(FATAL_ERROR "check_layering: give -DKERNELS_DIR=<the source tree's src/kernels>")
endif()

set(violations "")
set(checked 0)
# check_layer(<folder> <regex the included path must match> <what the rule says>)
macro(check_layer folder allowed rule)
  file(GLOB_RECURSE _files "${KERNELS_DIR}/${folder}/*.hpp" "${KERNELS_DIR}/${folder}/*.cpp")
  if(NOT _files)
    message(FATAL_ERROR "check_layering: no sources under ${KERNELS_DIR}/${folder}")
  endif()
  foreach(_file IN LISTS _files)
    math(EXPR checked "${checked} + 1")
    file(STRINGS "${_file}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(_line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]*)\".*$" "\\1" _included "${_line}")
      file(RELATIVE_PATH _where "${KERNELS_DIR}" "${_file}")
      if(NOT _included MATCHES "${allowed}")
        string(APPEND violations "\n  kernels/${_where} includes \"${_included}\" (${rule})")
      elseif(_included STREQUAL "core/config.hpp")
        string(APPEND violations "\n  kernels/${_where} includes the whole deck (core/deck_words.hpp has its words)")
      endif()
    endforeach()
  endforeach()
endmacro()

check_layer(base "^(core|kernels/base)/" "base/ includes only base/ and core/")
check_layer(layers "^(core|kernels/base|kernels/layers)/" "layers/ includes only base/, layers/ and core/")
check_layer(attention "^(core|kernels)/" "attention/ includes only kernels/ and core/")

if(violations)
  message(FATAL_ERROR "check_layering: src/kernels breaks its layering:${violations}")
endif()
message(STATUS "check_layering: ${checked} files of src/kernels keep their layering")
