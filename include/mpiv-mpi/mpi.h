/*
 * mpi.h — MPIv's MPI face: the subset of MPI-3.1's C interface that MPIv
 * supports, as a thin layer over the native API (mpiv.h). Programs that
 * include it are built with `mpivcc` (or pkg-config mpiv-mpi) and linked
 * with libmpiv-mpi and libmpiv; they run under mpiv_run.
 *
 * This header lives in its own folder (include/mpiv-mpi/) so that it is
 * never found in place of a system MPI's mpi.h, nor the other way round.
 *
 * What is here works as the MPI standard says, with the limits written
 * next to each block and in docs/mpi.md. What is not here is not supported:
 * a program that uses it fails to compile or to link, and a supported call
 * used in an unsupported way returns MPI_ERR_UNSUPPORTED_OPERATION (or
 * aborts, under MPI_ERRORS_ARE_FATAL) with a message saying what.
 *
 * Handles are pointers: an MPI_Request is MPIv's own request handle, an
 * MPI_Message its matched-message handle; communicators, datatypes and
 * operations are small structs of the face. Constant values are MPIv's
 * own: programs must use the names, never the numbers.
 */
#ifndef MPIV_MPI_H
#define MPIV_MPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MPIV_MPI_FACE 1 /* lets a program tell it is built against MPIv's face */

#define MPI_VERSION 3
#define MPI_SUBVERSION 1

/* --- handles ----------------------------------------------------------- */

struct mpiv_request;
struct mpiv_message;
typedef struct mpiv_mpi_comm *MPI_Comm;
typedef struct mpiv_mpi_type *MPI_Datatype;
typedef struct mpiv_mpi_op *MPI_Op;
typedef struct mpiv_mpi_errhandler *MPI_Errhandler;
typedef struct mpiv_request *MPI_Request;
typedef struct mpiv_message *MPI_Message;
typedef int MPI_Info;
typedef intptr_t MPI_Aint;
typedef long long MPI_Offset;
typedef long long MPI_Count;

typedef struct MPI_Status {
    int MPI_SOURCE;
    int MPI_TAG;
    int MPI_ERROR;
    int mpiv_cancelled_; /* private: MPI_Test_cancelled        */
    size_t mpiv_bytes_;  /* private: the message's size in bytes */
} MPI_Status;

#define MPI_STATUS_IGNORE ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE ((MPI_Status *)0)

extern struct mpiv_mpi_comm mpiv_mpi_comm_world_, mpiv_mpi_comm_self_;
#define MPI_COMM_WORLD (&mpiv_mpi_comm_world_)
#define MPI_COMM_SELF (&mpiv_mpi_comm_self_)
#define MPI_COMM_NULL ((MPI_Comm)0)
#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_OP_NULL ((MPI_Op)0)
#define MPI_REQUEST_NULL ((MPI_Request)0)
#define MPI_MESSAGE_NULL ((MPI_Message)0)
extern struct mpiv_message *const mpiv_mpi_message_no_proc_;
#define MPI_MESSAGE_NO_PROC (mpiv_mpi_message_no_proc_)
#define MPI_ERRHANDLER_NULL ((MPI_Errhandler)0)
#define MPI_INFO_NULL 0

/* --- special values ---------------------------------------------------- */

#define MPI_ANY_SOURCE (-2)
#define MPI_ANY_TAG (-1)
#define MPI_PROC_NULL (-3)
#define MPI_UNDEFINED (-32766)
#define MPI_IN_PLACE ((void *)1)
#define MPI_BOTTOM ((void *)0)

#define MPI_THREAD_SINGLE 0
#define MPI_THREAD_FUNNELED 1
#define MPI_THREAD_SERIALIZED 2
#define MPI_THREAD_MULTIPLE 3

#define MPI_COMM_TYPE_SHARED 1

#define MPI_MAX_ERROR_STRING 256
#define MPI_MAX_PROCESSOR_NAME 256
#define MPI_MAX_LIBRARY_VERSION_STRING 256

/* Attribute keys MPI_Comm_get_attr answers (others: flag = 0). */
#define MPI_TAG_UB 1
#define MPI_WTIME_IS_GLOBAL 2

/* --- error classes (an error code is its class) ------------------------ */

#define MPI_SUCCESS 0
#define MPI_ERR_BUFFER 1
#define MPI_ERR_COUNT 2
#define MPI_ERR_TYPE 3
#define MPI_ERR_TAG 4
#define MPI_ERR_COMM 5
#define MPI_ERR_RANK 6
#define MPI_ERR_REQUEST 7
#define MPI_ERR_ROOT 8
#define MPI_ERR_OP 9
#define MPI_ERR_ARG 10
#define MPI_ERR_UNKNOWN 11
#define MPI_ERR_TRUNCATE 12
#define MPI_ERR_OTHER 13
#define MPI_ERR_INTERN 14
#define MPI_ERR_IN_STATUS 15
#define MPI_ERR_PENDING 16
#define MPI_ERR_NO_MEM 17
#define MPI_ERR_UNSUPPORTED_OPERATION 18
#define MPI_ERR_LASTCODE 19

/* --- datatypes --------------------------------------------------------- */

extern struct mpiv_mpi_type mpiv_mpi_char_;
extern struct mpiv_mpi_type mpiv_mpi_signed_char_;
extern struct mpiv_mpi_type mpiv_mpi_unsigned_char_;
extern struct mpiv_mpi_type mpiv_mpi_byte_;
extern struct mpiv_mpi_type mpiv_mpi_short_;
extern struct mpiv_mpi_type mpiv_mpi_unsigned_short_;
extern struct mpiv_mpi_type mpiv_mpi_int_;
extern struct mpiv_mpi_type mpiv_mpi_unsigned_;
extern struct mpiv_mpi_type mpiv_mpi_long_;
extern struct mpiv_mpi_type mpiv_mpi_unsigned_long_;
extern struct mpiv_mpi_type mpiv_mpi_long_long_;
extern struct mpiv_mpi_type mpiv_mpi_unsigned_long_long_;
extern struct mpiv_mpi_type mpiv_mpi_float_;
extern struct mpiv_mpi_type mpiv_mpi_double_;
extern struct mpiv_mpi_type mpiv_mpi_long_double_;
extern struct mpiv_mpi_type mpiv_mpi_int8_t_;
extern struct mpiv_mpi_type mpiv_mpi_int16_t_;
extern struct mpiv_mpi_type mpiv_mpi_int32_t_;
extern struct mpiv_mpi_type mpiv_mpi_int64_t_;
extern struct mpiv_mpi_type mpiv_mpi_uint8_t_;
extern struct mpiv_mpi_type mpiv_mpi_uint16_t_;
extern struct mpiv_mpi_type mpiv_mpi_uint32_t_;
extern struct mpiv_mpi_type mpiv_mpi_uint64_t_;
extern struct mpiv_mpi_type mpiv_mpi_c_bool_;
extern struct mpiv_mpi_type mpiv_mpi_wchar_;
extern struct mpiv_mpi_type mpiv_mpi_aint_;
extern struct mpiv_mpi_type mpiv_mpi_offset_;
extern struct mpiv_mpi_type mpiv_mpi_count_;
extern struct mpiv_mpi_type mpiv_mpi_float_int_;
extern struct mpiv_mpi_type mpiv_mpi_double_int_;
extern struct mpiv_mpi_type mpiv_mpi_long_int_;
extern struct mpiv_mpi_type mpiv_mpi_2int_;
extern struct mpiv_mpi_type mpiv_mpi_short_int_;
extern struct mpiv_mpi_type mpiv_mpi_long_double_int_;
#define MPI_CHAR (&mpiv_mpi_char_)
#define MPI_SIGNED_CHAR (&mpiv_mpi_signed_char_)
#define MPI_UNSIGNED_CHAR (&mpiv_mpi_unsigned_char_)
#define MPI_BYTE (&mpiv_mpi_byte_)
#define MPI_SHORT (&mpiv_mpi_short_)
#define MPI_UNSIGNED_SHORT (&mpiv_mpi_unsigned_short_)
#define MPI_INT (&mpiv_mpi_int_)
#define MPI_UNSIGNED (&mpiv_mpi_unsigned_)
#define MPI_LONG (&mpiv_mpi_long_)
#define MPI_UNSIGNED_LONG (&mpiv_mpi_unsigned_long_)
#define MPI_LONG_LONG (&mpiv_mpi_long_long_)
#define MPI_LONG_LONG_INT MPI_LONG_LONG
#define MPI_UNSIGNED_LONG_LONG (&mpiv_mpi_unsigned_long_long_)
#define MPI_FLOAT (&mpiv_mpi_float_)
#define MPI_DOUBLE (&mpiv_mpi_double_)
#define MPI_LONG_DOUBLE (&mpiv_mpi_long_double_)
#define MPI_INT8_T (&mpiv_mpi_int8_t_)
#define MPI_INT16_T (&mpiv_mpi_int16_t_)
#define MPI_INT32_T (&mpiv_mpi_int32_t_)
#define MPI_INT64_T (&mpiv_mpi_int64_t_)
#define MPI_UINT8_T (&mpiv_mpi_uint8_t_)
#define MPI_UINT16_T (&mpiv_mpi_uint16_t_)
#define MPI_UINT32_T (&mpiv_mpi_uint32_t_)
#define MPI_UINT64_T (&mpiv_mpi_uint64_t_)
#define MPI_C_BOOL (&mpiv_mpi_c_bool_)
#define MPI_WCHAR (&mpiv_mpi_wchar_)
#define MPI_AINT (&mpiv_mpi_aint_)
#define MPI_OFFSET (&mpiv_mpi_offset_)
#define MPI_COUNT (&mpiv_mpi_count_)
/* the pair types of MPI_MINLOC and MPI_MAXLOC: a value, then an int index */
#define MPI_FLOAT_INT (&mpiv_mpi_float_int_)
#define MPI_DOUBLE_INT (&mpiv_mpi_double_int_)
#define MPI_LONG_INT (&mpiv_mpi_long_int_)
#define MPI_2INT (&mpiv_mpi_2int_)
#define MPI_SHORT_INT (&mpiv_mpi_short_int_)
#define MPI_LONG_DOUBLE_INT (&mpiv_mpi_long_double_int_)

/* --- reduction operations ---------------------------------------------- */

extern struct mpiv_mpi_op mpiv_mpi_max_;
extern struct mpiv_mpi_op mpiv_mpi_min_;
extern struct mpiv_mpi_op mpiv_mpi_sum_;
extern struct mpiv_mpi_op mpiv_mpi_prod_;
extern struct mpiv_mpi_op mpiv_mpi_land_;
extern struct mpiv_mpi_op mpiv_mpi_band_;
extern struct mpiv_mpi_op mpiv_mpi_lor_;
extern struct mpiv_mpi_op mpiv_mpi_bor_;
extern struct mpiv_mpi_op mpiv_mpi_lxor_;
extern struct mpiv_mpi_op mpiv_mpi_bxor_;
extern struct mpiv_mpi_op mpiv_mpi_minloc_;
extern struct mpiv_mpi_op mpiv_mpi_maxloc_;
#define MPI_MAX (&mpiv_mpi_max_)
#define MPI_MIN (&mpiv_mpi_min_)
#define MPI_SUM (&mpiv_mpi_sum_)
#define MPI_PROD (&mpiv_mpi_prod_)
#define MPI_LAND (&mpiv_mpi_land_)
#define MPI_BAND (&mpiv_mpi_band_)
#define MPI_LOR (&mpiv_mpi_lor_)
#define MPI_BOR (&mpiv_mpi_bor_)
#define MPI_LXOR (&mpiv_mpi_lxor_)
#define MPI_BXOR (&mpiv_mpi_bxor_)
#define MPI_MINLOC (&mpiv_mpi_minloc_)
#define MPI_MAXLOC (&mpiv_mpi_maxloc_)

typedef void MPI_User_function(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);

/* --- error handlers ---------------------------------------------------- */

extern struct mpiv_mpi_errhandler mpiv_mpi_errors_are_fatal_, mpiv_mpi_errors_return_;
#define MPI_ERRORS_ARE_FATAL (&mpiv_mpi_errors_are_fatal_)
#define MPI_ERRORS_RETURN (&mpiv_mpi_errors_return_)

/* --- environment ------------------------------------------------------- */

/* MPI_Init and MPI_Init_thread start MPIv (mpiv_init): call them from
 * main's thread. Every level is provided as MPI_THREAD_MULTIPLE: plain
 * pthreads and MPIv's ULTs may call MPI at once. MPI_Finalize must be
 * called by the same thread, once every other thread's MPI calls are
 * complete. */
int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Finalize(void);
int MPI_Initialized(int *flag);
int MPI_Finalized(int *flag);
int MPI_Query_thread(int *provided);
int MPI_Is_thread_main(int *flag);
/* Ends this process with errorcode; mpiv_run then ends every rank. */
int MPI_Abort(MPI_Comm comm, int errorcode);
double MPI_Wtime(void);
double MPI_Wtick(void);
int MPI_Get_processor_name(char *name, int *resultlen);
int MPI_Get_version(int *version, int *subversion);
int MPI_Get_library_version(char *version, int *resultlen);
int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr);
int MPI_Free_mem(void *base);

int MPI_Error_string(int errorcode, char *string, int *resultlen);
int MPI_Error_class(int errorcode, int *errorclass);
/* A user handler is called with the communicator and the error code,
 * then the call returns the code (as under MPI_ERRORS_RETURN). */
typedef void MPI_Comm_errhandler_function(MPI_Comm *comm, int *errcode, ...);
int MPI_Comm_create_errhandler(MPI_Comm_errhandler_function *function,
                               MPI_Errhandler *errhandler);
int MPI_Comm_call_errhandler(MPI_Comm comm, int errorcode);
int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
int MPI_Comm_get_errhandler(MPI_Comm comm, MPI_Errhandler *errhandler);
int MPI_Errhandler_free(MPI_Errhandler *errhandler);

/* --- communicators ----------------------------------------------------- */

int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
/* MPI_COMM_TYPE_SHARED: the ranks on the same host (by host name). */
int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm);
int MPI_Comm_free(MPI_Comm *comm);
int MPI_Comm_get_attr(MPI_Comm comm, int keyval, void *attribute_val, int *flag);

/* --- point-to-point ---------------------------------------------------- */

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Rsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
             MPI_Status *status);
int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Issend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request);
int MPI_Irsend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
               MPI_Comm comm, MPI_Request *request);
int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
              MPI_Request *request);
int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status *status);
int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype datatype, int dest, int sendtag,
                         int source, int recvtag, MPI_Comm comm, MPI_Status *status);

/* Persistent requests: MPI_Start starts the operation as its non-blocking
 * call would (Isend, Issend, Irecv; a ready send is a standard one); the
 * completion calls make the request inactive, MPI_Request_free frees it. */
int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                  MPI_Comm comm, MPI_Request *request);
int MPI_Ssend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Rsend_init(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                   MPI_Comm comm, MPI_Request *request);
int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                  MPI_Comm comm, MPI_Request *request);
int MPI_Start(MPI_Request *request);
int MPI_Startall(int count, MPI_Request requests[]);

int MPI_Wait(MPI_Request *request, MPI_Status *status);
int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]);
int MPI_Testall(int count, MPI_Request requests[], int *flag, MPI_Status statuses[]);
int MPI_Waitany(int count, MPI_Request requests[], int *index, MPI_Status *status);
int MPI_Testany(int count, MPI_Request requests[], int *index, int *flag, MPI_Status *status);
int MPI_Waitsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[]);
int MPI_Testsome(int incount, MPI_Request requests[], int *outcount, int indices[],
                 MPI_Status statuses[]);
/* An active request set free completes on its own; its buffer belongs to
 * MPIv until then (as the standard says, nothing tells the program when). */
int MPI_Request_free(MPI_Request *request);
/* Receives are cancelled if nothing matched them yet; a send is never
 * cancelled (MPI_Test_cancelled then says 0 once it completes). */
int MPI_Cancel(MPI_Request *request);
int MPI_Test_cancelled(const MPI_Status *status, int *flag);

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *status);
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *status);
int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *message, MPI_Status *status);
int MPI_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *message,
                MPI_Status *status);
int MPI_Mrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
              MPI_Status *status);
int MPI_Imrecv(void *buf, int count, MPI_Datatype datatype, MPI_Message *message,
               MPI_Request *request);
int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count);

/* --- datatypes --------------------------------------------------------- */

/* Derived types are contiguous and (h)vector layouts of any type; a
 * non-contiguous one is packed into a temporary buffer to be sent and
 * unpacked from one when received. */
int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype);
int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype);
int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype);
int MPI_Type_commit(MPI_Datatype *datatype);
int MPI_Type_free(MPI_Datatype *datatype);
int MPI_Type_size(MPI_Datatype datatype, int *size);
int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent);

int MPI_Op_create(MPI_User_function *user_fn, int commute, MPI_Op *op);
int MPI_Op_free(MPI_Op *op);
int MPI_Op_commutative(MPI_Op op, int *commute);

/* --- collectives ------------------------------------------------------- */

int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm);
int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                  MPI_Op op, MPI_Comm comm);
int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Gatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm);
int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Scatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm);
int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                   MPI_Comm comm);
int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Alltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                  const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Reduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm);
int MPI_Scan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
             MPI_Comm comm);
int MPI_Exscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               MPI_Comm comm);

/* Non-blocking collectives: each runs its blocking form in a ULT of MPIv,
 * one after another per communicator in the order they were started, on a
 * context of their own; their requests complete with MPI_Wait and the
 * other completion calls (cancel: not supported). The v forms' count and
 * displacement arrays must stay as they are until then, as MPI says. */
int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request);
int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request *request);
int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request *request);
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                MPI_Request *request);
int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request *request);
int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                 const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                 MPI_Comm comm, MPI_Request *request);
int MPI_Iscatterv(const void *sendbuf, const int sendcounts[], const int displs[],
                  MPI_Datatype sendtype, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                  int root, MPI_Comm comm, MPI_Request *request);
int MPI_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                    const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                    MPI_Comm comm, MPI_Request *request);
int MPI_Ialltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
                   MPI_Datatype sendtype, void *recvbuf, const int recvcounts[],
                   const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                   MPI_Request *request);
int MPI_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[],
                        MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request *request);
int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                              MPI_Request *request);
int MPI_Iscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm, MPI_Request *request);
int MPI_Iexscan(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                MPI_Comm comm, MPI_Request *request);

#ifdef __cplusplus
}
#endif
#endif /* MPIV_MPI_H */
