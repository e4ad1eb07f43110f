// libdeltakv.so: every symbol comes from the shim's archive, linked whole; this file only gives
// the shared library a translation unit of its own.
namespace deltakv {
extern const char kSharedLibraryTag[] = "libdeltakv";
}  // namespace deltakv
