# LibTorch, for the TorchScript model the backend runs (included by CMakeLists.txt).
# find_package reads TorchConfig.cmake: Debian/Ubuntu's libtorch-dev installs it; for a libtorch
# download, configure with -DTorch_DIR=<libtorch>/share/cmake/Torch.
find_package(Torch REQUIRED)
# TORCH_LIBRARIES are imported targets: their include directories are SYSTEM ones.
target_link_libraries(${BACKEND_TARGET} PRIVATE ${TORCH_LIBRARIES})
