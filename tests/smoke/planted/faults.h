// Decoupled-protocol faults planted into a generated C++ backend by tbgen's tests
// (tests/smoke/test_decoupled_protocol.py): each model of the planted library breaks the protocol one
// way, chosen by its name; a model whose name names no fault streams as generated.
#pragma once

#include <string>

#include "triton/core/tritonbackend.h"

namespace planted_faults {

enum class Fault { kNone, kAfterFinal, kFinalTwice, kErrorMid, kNeverFinal };

inline Fault
FaultOf(const std::string& model_name)
{
  const auto has = [&](const char* part) {
    return model_name.find(part) != std::string::npos;
  };
  if (has("after_final")) {
    return Fault::kAfterFinal;
  }
  if (has("final_twice")) {
    return Fault::kFinalTwice;
  }
  if (has("error_mid")) {
    return Fault::kErrorMid;
  }
  return has("never_final") ? Fault::kNeverFinal : Fault::kNone;
}

// The final flag as a model with 'fault' sends it: none at all (never_final), or twice (final_twice).
inline void
SendFinalFlag(TRITONBACKEND_ResponseFactory* factory, const Fault fault)
{
  if (fault == Fault::kNeverFinal) {
    return;
  }
  const int times = fault == Fault::kFinalTwice ? 2 : 1;
  for (int i = 0; i < times; ++i) {
    TRITONSERVER_Error* err = TRITONBACKEND_ResponseFactorySendFlags(
        factory, TRITONSERVER_RESPONSE_COMPLETE_FINAL);
    if (err != nullptr) {
      TRITONSERVER_ErrorDelete(err);
    }
  }
}

// After the first data response of an error_mid model: an error response that does not end the stream
// (no final flag), before the data responses that follow.
inline void
AfterResponse(
    TRITONBACKEND_ResponseFactory* factory, const Fault fault, const size_t sent)
{
  if (fault != Fault::kErrorMid || sent != 1) {
    return;
  }
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONBACKEND_ResponseNewFromFactory(&response, factory) != nullptr) {
    return;
  }
  TRITONSERVER_Error* error = TRITONSERVER_ErrorNew(
      TRITONSERVER_ERROR_INTERNAL, "planted: an error in mid-stream");
  TRITONSERVER_Error* err = TRITONBACKEND_ResponseSend(response, 0, error);
  TRITONSERVER_ErrorDelete(error);
  if (err != nullptr) {
    TRITONSERVER_ErrorDelete(err);
  }
}

}  // namespace planted_faults
