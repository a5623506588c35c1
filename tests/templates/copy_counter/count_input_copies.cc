// Test-only, linked into a rendered cpp-backend by count_input_copies.cmake: logs, for each execution, how
// many input bytes the backend copied, as
//   "count_input_copies: N request(s), M input bytes copied"
// at INFO level. A copy is a memcpy (of the backend's own code or of Triton's backend utilities linked into
// it: -Wl,--wrap=memcpy) whose source lies in one of the execution's request input buffers.

// This file defines the real entry point; the generated one is renamed for the other sources only.
#undef TRITONBACKEND_ModelInstanceExecute

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "triton/backend/backend_common.h"
#include "triton/core/tritonbackend.h"

extern "C" {
void* __real_memcpy(void* dst, const void* src, size_t size);
void* __real___memcpy_chk(void* dst, const void* src, size_t size, size_t dst_size);
TRITONSERVER_Error* CountedModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count);
}

namespace {

struct Execution {
  std::vector<std::pair<const char*, const char*>> inputs;  // [begin, end) of each input buffer
  std::atomic<size_t> copied{0};
};

// The execution in progress (executions of the one instance do not overlap).
std::atomic<Execution*> current{nullptr};

void
Count(const void* src, const size_t size)
{
  Execution* execution = current.load();
  if (execution == nullptr) {
    return;
  }
  const char* source = static_cast<const char*>(src);
  for (const auto& input : execution->inputs) {
    if (source >= input.first && source < input.second) {
      execution->copied += size;
      return;
    }
  }
}

TRITONSERVER_Error*
AddInputBuffers(TRITONBACKEND_Request* request, Execution* execution)
{
  uint32_t input_count = 0;
  RETURN_IF_ERROR(TRITONBACKEND_RequestInputCount(request, &input_count));
  for (uint32_t i = 0; i < input_count; ++i) {
    TRITONBACKEND_Input* input = nullptr;
    RETURN_IF_ERROR(TRITONBACKEND_RequestInputByIndex(request, i, &input));
    uint32_t buffer_count = 0;
    RETURN_IF_ERROR(TRITONBACKEND_InputProperties(
        input, nullptr, nullptr, nullptr, nullptr, nullptr, &buffer_count));
    for (uint32_t b = 0; b < buffer_count; ++b) {
      const void* buffer = nullptr;
      uint64_t byte_size = 0;
      TRITONSERVER_MemoryType memory_type = TRITONSERVER_MEMORY_CPU;
      int64_t memory_type_id = 0;
      RETURN_IF_ERROR(TRITONBACKEND_InputBuffer(
          input, b, &buffer, &byte_size, &memory_type, &memory_type_id));
      const char* begin = static_cast<const char*>(buffer);
      execution->inputs.emplace_back(begin, begin + byte_size);
    }
  }
  return nullptr;
}

}  // namespace

extern "C" {

void*
__wrap_memcpy(void* dst, const void* src, size_t size)
{
  Count(src, size);
  return __real_memcpy(dst, src, size);
}

void*
__wrap___memcpy_chk(void* dst, const void* src, size_t size, size_t dst_size)
{
  Count(src, size);
  return __real___memcpy_chk(dst, src, size, dst_size);
}

TRITONBACKEND_ISPEC TRITONSERVER_Error*
TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests,
    const uint32_t request_count)
{
  Execution execution;
  for (uint32_t r = 0; r < request_count; ++r) {
    LOG_IF_ERROR(
        AddInputBuffers(requests[r], &execution),
        "count_input_copies: cannot read the input buffers");
  }
  current = &execution;
  TRITONSERVER_Error* err =
      CountedModelInstanceExecute(instance, requests, request_count);
  current = nullptr;
  LOG_MESSAGE(
      TRITONSERVER_LOG_INFO,
      ("count_input_copies: " + std::to_string(request_count) +
       " request(s), " + std::to_string(execution.copied.load()) +
       " input bytes copied")
          .c_str());
  return err;
}

}  // extern "C"
