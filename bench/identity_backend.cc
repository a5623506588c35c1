// The floor for bench/backends.py: a backend that does nothing but what every backend must do for the same
// tensors as the generated add/sub model. For each request it copies INPUT0 to OUTPUT0 and INPUT1 to OUTPUT1,
// reports statistics and sends the response; no model or instance state, no input collector, no batching of
// the copies. Written for the benchmark (built with g++ against Triton's core headers, loaded from the model's
// directory as libtriton_identity_ref.so).

#include <chrono>
#include <cstdint>
#include <cstring>

#include "triton/core/tritonbackend.h"

namespace {

uint64_t NowNs()
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Copies one input into a new output of the response, buffer by buffer (no staging copy).
TRITONSERVER_Error*
CopyTensor(
    TRITONBACKEND_Request* request, TRITONBACKEND_Response* response,
    const char* input_name, const char* output_name, uint64_t* batch_size)
{
  TRITONBACKEND_Input* input = nullptr;
  TRITONSERVER_Error* err = TRITONBACKEND_RequestInput(request, input_name, &input);
  if (err != nullptr) {
    return err;
  }
  TRITONSERVER_DataType datatype;
  const int64_t* shape = nullptr;
  uint32_t dims_count = 0;
  uint64_t byte_size = 0;
  uint32_t buffer_count = 0;
  err = TRITONBACKEND_InputProperties(
      input, nullptr, &datatype, &shape, &dims_count, &byte_size, &buffer_count);
  if (err != nullptr) {
    return err;
  }
  *batch_size = dims_count > 0 ? static_cast<uint64_t>(shape[0]) : 1;
  TRITONBACKEND_Output* output = nullptr;
  err = TRITONBACKEND_ResponseOutput(
      response, &output, output_name, datatype, shape, dims_count);
  if (err != nullptr) {
    return err;
  }
  void* destination = nullptr;
  TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
  int64_t memory_type_id = 0;
  err = TRITONBACKEND_OutputBuffer(
      output, &destination, byte_size, &memory_type, &memory_type_id);
  if (err != nullptr) {
    return err;
  }
  uint64_t offset = 0;
  for (uint32_t index = 0; index < buffer_count; ++index) {
    const void* source = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType source_type = TRITONSERVER_MEMORY_CPU;
    int64_t source_type_id = 0;
    err = TRITONBACKEND_InputBuffer(
        input, index, &source, &size, &source_type, &source_type_id);
    if (err != nullptr) {
      return err;
    }
    std::memcpy(static_cast<char*>(destination) + offset, source, size);
    offset += size;
  }
  return nullptr;
}

}  // namespace

extern "C" {

TRITONSERVER_Error*
TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count)
{
  const uint64_t exec_start = NowNs();
  uint64_t total_batch = 0;
  for (uint32_t r = 0; r < request_count; ++r) {
    TRITONBACKEND_Request* request = requests[r];
    const uint64_t start = NowNs();
    TRITONBACKEND_Response* response = nullptr;
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseNew(&response, request);
    uint64_t batch_size = 1;
    if (err == nullptr) {
      err = CopyTensor(request, response, "INPUT0", "OUTPUT0", &batch_size);
    }
    if (err == nullptr) {
      err = CopyTensor(request, response, "INPUT1", "OUTPUT1", &batch_size);
    }
    const uint64_t end = NowNs();
    if (response != nullptr) {
      TRITONSERVER_Error* send_err = TRITONBACKEND_ResponseSend(
          response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, err);
      if (send_err != nullptr) {
        TRITONSERVER_ErrorDelete(send_err);
      }
    }
    TRITONSERVER_Error* stats_err = TRITONBACKEND_ModelInstanceReportStatistics(
        instance, request, err == nullptr, start, start, end, end);
    if (stats_err != nullptr) {
      TRITONSERVER_ErrorDelete(stats_err);
    }
    if (err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
    }
    total_batch += batch_size;
    TRITONSERVER_Error* release_err =
        TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL);
    if (release_err != nullptr) {
      TRITONSERVER_ErrorDelete(release_err);
    }
  }
  const uint64_t exec_end = NowNs();
  TRITONSERVER_Error* err = TRITONBACKEND_ModelInstanceReportBatchStatistics(
      instance, total_batch, exec_start, exec_start, exec_end, exec_end);
  if (err != nullptr) {
    TRITONSERVER_ErrorDelete(err);
  }
  return nullptr;
}

}  // extern "C"
