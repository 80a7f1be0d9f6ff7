// Every executable that links Arclight calls the system's libstdc++, even where a library before it
// (LibTorch from pip, or here its stand-in, libstdcxx_exporter.cpp) exports its own copy.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <filesystem>
#include <string>

std::uintmax_t exporter_remove_tree(const std::filesystem::path& root);

namespace arc {
namespace {

// What Arclight calls of std::filesystem to walk and remove folder trees, in the C++ ABI it is built with.
#if _GLIBCXX_USE_CXX11_ABI
constexpr const char* kFilesystemSymbols[] = {
    "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE",
    "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code",
    "_ZNSt10filesystem18create_directoriesERKNS_7__cxx114pathE",
    "_ZNSt10filesystem7__cxx1118directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code",
    "_ZNSt10filesystem7__cxx1118directory_iteratorppEv",
    "_ZNSt10filesystem7__cxx1128recursive_directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code",
    "_ZNSt10filesystem7__cxx1128recursive_directory_iteratorppEv",
    "_ZNSt10filesystem7__cxx1128recursive_directory_iteratorD1Ev"};
#else
constexpr const char* kFilesystemSymbols[] = {
    "_ZNSt10filesystem10remove_allERKNS_4pathE",
    "_ZNSt10filesystem10remove_allERKNS_4pathERSt10error_code",
    "_ZNSt10filesystem18create_directoriesERKNS_4pathE",
    "_ZNSt10filesystem18directory_iteratorC1ERKNS_4pathENS_17directory_optionsEPSt10error_code",
    "_ZNSt10filesystem18directory_iteratorppEv",
    "_ZNSt10filesystem28recursive_directory_iteratorC1ERKNS_4pathENS_17directory_optionsEPSt10error_code",
    "_ZNSt10filesystem28recursive_directory_iteratorppEv",
    "_ZNSt10filesystem28recursive_directory_iteratorD1Ev"};
#endif

std::string library_of(void* address) {
  Dl_info info{};
  return address && dladdr(address, &info) && info.dli_fname ? info.dli_fname : "nowhere";
}

TEST(LinkOrder, StdFilesystemIsLibstdcxxsWhereALibraryLoadedBeforeItExportsItsOwn) {
  void* libstdcxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(libstdcxx, nullptr) << dlerror();
  const auto exporter_path = library_of(reinterpret_cast<void*>(&exporter_remove_tree));
  void* exporter = dlopen(exporter_path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(exporter, nullptr) << dlerror();
  for (const char* symbol : kFilesystemSymbols) {
    void* own = dlsym(libstdcxx, symbol);
    ASSERT_NE(own, nullptr) << symbol;
    // Else the stand-in would not stand in for LibTorch, and this test could not fail.
    EXPECT_EQ(library_of(dlsym(exporter, symbol)), exporter_path) << symbol;
    // What the program's calls bind to: the first loaded library that defines the symbol.
    void* bound = dlsym(RTLD_DEFAULT, symbol);
    EXPECT_EQ(bound, own) << symbol << " is called in " << library_of(bound);
  }
  dlclose(exporter);
  dlclose(libstdcxx);
}

}  // namespace
}  // namespace arc
