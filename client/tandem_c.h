/* The C ABI of the Tandem client library (libtandem), for other languages.
 *
 * Every function returning int returns 0 on success or an absl::StatusCode
 * value (3 INVALID_ARGUMENT, 5 NOT_FOUND, 8 RESOURCE_EXHAUSTED,
 * 14 UNAVAILABLE, ...) on failure; tandem_last_error() then gives the
 * message (per thread, valid until the thread's next call).
 *
 * Ownership: objects returned through out-parameters belong to the caller
 * and are freed with the matching *_free / tandem_disconnect. Tensor data
 * passed in is copied before the call returns. Pointers inside a
 * tandem_result stay valid until tandem_result_free.
 *
 * Thread-safety: a tandem_client may be used from several threads.
 */
#ifndef TANDEM_CLIENT_TANDEM_C_H_
#define TANDEM_CLIENT_TANDEM_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TANDEM_C_API_VERSION 1

/* dtype values are tandem.v1.DType: 1 float32, 2 float64, 3 int64,
 * 4 int32, 5 bool, 6 bfloat16, 7 float16. */
typedef struct tandem_tensor {
  const char* name;
  int32_t dtype;
  const int64_t* shape;
  int32_t rank;
  const void* data;
  uint64_t nbytes;
} tandem_tensor;

typedef struct tandem_client tandem_client;
typedef struct tandem_result tandem_result;

int tandem_c_api_version(void);
const char* tandem_last_error(void);

/* endpoint NULL or "": $TANDEM_ENDPOINT, else the default socket. */
int tandem_connect(const char* endpoint, const char* client_name, double connect_timeout_seconds, tandem_client** out);
void tandem_disconnect(tandem_client* client);
uint64_t tandem_session_id(const tandem_client* client);

/* Registers a job. request_json is a tandem.v1.RegisterJobRequest in
 * protobuf's JSON mapping; the data of its persistent tensors may be left
 * out of the JSON and given in `persistent` instead (matched by name).
 * On success *job_id is set and, if response_json is not NULL, it receives
 * the RegisterJobResponse as JSON (free with tandem_free_string). */
int tandem_register_job(tandem_client* client, const char* request_json, const tandem_tensor* persistent,
                        size_t num_persistent, uint64_t* job_id, char** response_json);

/* Sends one iteration; *ticket identifies it for tandem_wait. Several may
 * be in flight. */
int tandem_submit(tandem_client* client, uint64_t job_id, const tandem_tensor* feeds, size_t num_feeds,
                  const char* const* fetches, size_t num_fetches, uint64_t iteration, uint64_t* ticket);
/* The same for one of the job's graph variants (RegisterJobRequest.variants,
 * by name; NULL or "" is the registered graph). */
int tandem_submit_variant(tandem_client* client, uint64_t job_id, const char* variant, const tandem_tensor* feeds,
                          size_t num_feeds, const char* const* fetches, size_t num_fetches, uint64_t iteration,
                          uint64_t* ticket);
int tandem_wait(tandem_client* client, uint64_t ticket, tandem_result** out);

/* One persistent tensor's current value, as a result with one tensor. */
int tandem_read_tensor(tandem_client* client, uint64_t job_id, const char* name, tandem_result** out);
int tandem_close_job(tandem_client* client, uint64_t job_id);

/* The daemon's stats / sessions as JSON (free with tandem_free_string). */
int tandem_stats_json(tandem_client* client, char** json);
int tandem_list_sessions_json(tandem_client* client, char** json);

size_t tandem_result_count(const tandem_result* result);
/* Fills *out with the i-th tensor (name, dtype, shape, data). */
int tandem_result_tensor(const tandem_result* result, size_t i, tandem_tensor* out);
double tandem_result_run_seconds(const tandem_result* result);
double tandem_result_queue_seconds(const tandem_result* result);
void tandem_result_free(tandem_result* result);
void tandem_free_string(char* s);

#ifdef __cplusplus
}
#endif

#endif /* TANDEM_CLIENT_TANDEM_C_H_ */
