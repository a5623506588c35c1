# OpenCV's DNN module, for the ONNX model the backend runs (included by CMakeLists.txt).
# Debian/Ubuntu's libopencv-dnn-dev installs the headers and libraries (without OpenCV's CMake
# package, which comes with libopencv-dev); elsewhere, configure with -DOpenCV_ROOT=<prefix>.
find_path(OPENCV_DNN_INCLUDE_DIR opencv2/dnn.hpp PATH_SUFFIXES opencv4 REQUIRED)
find_library(OPENCV_DNN_LIBRARY opencv_dnn REQUIRED)
find_library(OPENCV_CORE_LIBRARY opencv_core REQUIRED)
target_include_directories(${BACKEND_TARGET} SYSTEM PRIVATE ${OPENCV_DNN_INCLUDE_DIR})
target_link_libraries(${BACKEND_TARGET} PRIVATE ${OPENCV_DNN_LIBRARY} ${OPENCV_CORE_LIBRARY})
