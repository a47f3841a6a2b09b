#include "plugin/library_install.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "plugin/file_replace.h"
#include "plugin/test_util.h"

namespace accelpool::plugin {
namespace {

using testing::TempDir;
using testing::WriteFile;

// The first bytes of an x86-64 shared object (ELF64, little-endian, ET_DYN),
// then `tag`: what the check reads, and a content that tells versions apart.
std::string SharedObject(const std::string& tag, int type = 3) {
  std::string b(64, '\0');
  b[0] = '\x7f';
  b[1] = 'E';
  b[2] = 'L';
  b[3] = 'F';
  b[4] = 2;  // ELFCLASS64
  b[5] = 1;  // little-endian
  b[6] = 1;  // EV_CURRENT
  b[16] = static_cast<char>(type);
  return b + tag + std::string(4096, 'x');
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

ino_t Inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

class LibraryInstallTest : public ::testing::Test {
 protected:
  LibraryInstall Install(const std::string& version) {
    WriteFile(dir_.File("image.so"), SharedObject(version));
    return {dir_.File("image.so"), dir_.path() + "/host/lib/libaccelpool-cuda.so",
            dir_.path() + "/host/ld.so.preload", "/usr/local/accelpool/lib/libaccelpool-cuda.so"};
  }
  TempDir dir_;
};

TEST_F(LibraryInstallTest, InstallsBothFilesAndWritesNothingTheSecondTime) {
  const LibraryInstall in = Install("v1");
  StatusOr<LibraryInstallResult> first = InstallEnforcementLibrary(in);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->library_written);
  EXPECT_TRUE(first->preload_written);
  EXPECT_EQ(first->library_bytes, static_cast<int64_t>(SharedObject("v1").size()));
  EXPECT_EQ(Read(in.library), SharedObject("v1"));
  EXPECT_EQ(Read(in.preload_file), "/usr/local/accelpool/lib/libaccelpool-cuda.so\n");
  using std::filesystem::perms;
  const perms p = std::filesystem::status(in.library).permissions();
  EXPECT_EQ(p & (perms::group_write | perms::others_write), perms::none);
  EXPECT_NE(p & perms::others_read, perms::none);
  const ino_t library_inode = Inode(in.library);
  const ino_t preload_inode = Inode(in.preload_file);

  std::filesystem::permissions(in.library, perms::owner_read | perms::owner_write,
                               std::filesystem::perm_options::replace);
  StatusOr<LibraryInstallResult> again = InstallEnforcementLibrary(in);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->library_written);
  EXPECT_FALSE(again->preload_written);
  EXPECT_EQ(Inode(in.library), library_inode);
  EXPECT_EQ(Inode(in.preload_file), preload_inode);
  EXPECT_NE(std::filesystem::status(in.library).permissions() & perms::others_read, perms::none)
      << "a library left unreadable to containers' users was not put right";
}

// What HAMi's plugin does on a restart (copying over the mapped library)
// crashes running containers. Here a process that mapped the old library (a
// running container) keeps its bytes; the path names the new one.
TEST_F(LibraryInstallTest, AnUpgradeLeavesTheLibraryARunningProcessMappedAsItWas) {
  const LibraryInstall v1 = Install("v1");
  ASSERT_TRUE(InstallEnforcementLibrary(v1).ok());
  int fd = ::open(v1.library.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const size_t size = SharedObject("v1").size();
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(map, MAP_FAILED);
  const ino_t old_inode = Inode(v1.library);

  const LibraryInstall v2 = Install("v2");
  StatusOr<LibraryInstallResult> up = InstallEnforcementLibrary(v2);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_TRUE(up->library_written);
  EXPECT_FALSE(up->preload_written) << "the preload file names the same path";
  EXPECT_EQ(std::string(static_cast<const char*>(map), size), SharedObject("v1"))
      << "the mapped library changed under the process";
  EXPECT_EQ(Read(v2.library), SharedObject("v2"));
  EXPECT_NE(Inode(v2.library), old_inode);
  ::munmap(map, size);
}

TEST_F(LibraryInstallTest, ABrokenImageOrBadPathsInstallNothing) {
  const LibraryInstall good = Install("v1");
  ASSERT_TRUE(InstallEnforcementLibrary(good).ok());
  struct Case {
    std::string name;
    std::string content;  // of the source; "-" = no source file
    std::string want;
  };
  const Case cases[] = {
      {"empty", "", "is not an ELF file (0 bytes)"},
      {"a script", "#!/bin/sh\necho hello\n" + std::string(64, ' '), "is not an ELF file"},
      {"an executable", SharedObject("exe", /*type=*/2), "of type 2, not a shared object"},
      {"missing", "-", "the image does not ship it"},
  };
  for (const Case& c : cases) {
    LibraryInstall in = good;
    in.source = dir_.File("bad-" + std::to_string(&c - cases));
    if (c.content != "-") {
      WriteFile(in.source, c.content);
    }
    StatusOr<LibraryInstallResult> r = InstallEnforcementLibrary(in);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.want), std::string::npos)
        << c.name << ": " << r.status().ToString();
    EXPECT_EQ(Read(good.library), SharedObject("v1")) << c.name;
  }
  LibraryInstall directory = good;
  directory.source = dir_.path();
  EXPECT_NE(InstallEnforcementLibrary(directory).status().message().find("not a regular file"),
            std::string::npos);
  LibraryInstall relative = good;
  relative.library = "lib/libaccelpool-cuda.so";
  EXPECT_NE(InstallEnforcementLibrary(relative).status().message().find("--cuda-library must be"),
            std::string::npos);
  LibraryInstall spaced = good;
  spaced.preload_entry = "/a b.so";
  EXPECT_EQ(InstallEnforcementLibrary(spaced).status().code(), StatusCode::kInvalidArgument);
  // A target directory that cannot be made: the error names it.
  WriteFile(dir_.File("file"), "x");
  LibraryInstall blocked = good;
  blocked.library = dir_.File("file") + "/lib/libaccelpool-cuda.so";
  Status st = InstallEnforcementLibrary(blocked).status();
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("mount the host directory writable"), std::string::npos)
      << st.ToString();
}

TEST_F(LibraryInstallTest, AnInterruptedInstallLeavesNothingBehindTheNextOne) {
  const LibraryInstall in = Install("v1");
  std::filesystem::create_directories(dir_.path() + "/host/lib");
  WriteFile(in.library + ".tmp-4242", "half a libr");
  WriteFile(in.preload_file + ".tmp-77", "/usr/lo");
  ASSERT_TRUE(InstallEnforcementLibrary(in).ok());
  for (const std::string& d : {dir_.path() + "/host", dir_.path() + "/host/lib"}) {
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
  }
}

TEST_F(LibraryInstallTest, MissingFilesAreNamedWithWhatToDo) {
  const LibraryInstall in = Install("v1");
  std::string none = MissingEnforcementFiles(in.library, in.preload_file, true);
  EXPECT_NE(none.find(in.library + " and " + in.preload_file + " not found"), std::string::npos)
      << none;
  EXPECT_NE(none.find("--install-cuda-library"), std::string::npos) << none;
  ASSERT_TRUE(InstallEnforcementLibrary(in).ok());
  EXPECT_EQ(MissingEnforcementFiles(in.library, in.preload_file, true), "");
  EXPECT_EQ(MissingEnforcementFiles(in.library, dir_.File("nope"), false), "");
  EXPECT_EQ(
      MissingEnforcementFiles(in.library, dir_.File("nope"), true).rfind(dir_.File("nope"), 0), 0u);
}

TEST(FileReplaceTest, AFailedReplaceKeepsTheOldFileAndNoTemporaryOne) {
  TempDir dir;
  const std::string path = dir.File("f");
  bool written = false;
  ASSERT_TRUE(ReplaceFileIfChanged(path, "one", ReplaceOptions(), &written).ok());
  EXPECT_TRUE(written);
  // A directory where the file should go: the rename fails.
  const std::string blocked = dir.File("d");
  std::filesystem::create_directories(blocked + "/inside");
  Status st = ReplaceFileIfChanged(blocked, "two", ReplaceOptions(), &written);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(written);
  EXPECT_NE(st.message().find(blocked), std::string::npos) << st.ToString();
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  EXPECT_EQ(Read(path), "one");
}

}  // namespace
}  // namespace accelpool::plugin
