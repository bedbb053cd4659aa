#pragma once
// Catch2 v3 (Ubuntu 24.04) or v2 (Debian 12), whichever the build found.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif
