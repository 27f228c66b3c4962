/*
 * type.c — datatypes and reduction operations of the MPI face.
 *
 * A predefined type is one basic element; a derived one (contiguous,
 * vector, hvector) is blocks of another type. Every type records its
 * packed size (`wire`) and whether its memory layout already is its packed
 * form (`contig`): contiguous buffers go to MPIv as they are, the others
 * through a packed copy (face_pack / face_unpack).
 *
 * Reductions: MPIv's collectives take its own element types and built-in
 * operations; coll.c uses them whenever a type's kind has an MPIv type and
 * the op an MPIv built-in. face_op_apply is the face's own kernel for the
 * rest (the XORs, MINLOC / MAXLOC on pairs, long double, C bool, user
 * functions), used by coll.c's point-to-point reductions.
 */
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "face.h"

struct pair_float { float v; int i; };
struct pair_double { double v; int i; };
struct pair_long { long v; int i; };
struct pair_int { int v; int i; };
struct pair_short { short v; int i; };
struct pair_ldouble { long double v; int i; };

/* the kind of a signed / unsigned integer of n bytes */
#define SKIND(n) ((n) == 1 ? K_I8 : (n) == 2 ? K_I16 : (n) == 4 ? K_I32 : K_I64)
#define UKIND(n) ((n) == 1 ? K_U8 : (n) == 2 ? K_U16 : (n) == 4 ? K_U32 : K_U64)

#define BASIC(ctype, k) \
    { .size = sizeof(ctype), .extent = sizeof(ctype), .wire = sizeof(ctype), .nbasic = 1, \
      .kind = (k), .contig = true, .predefined = true, .committed = true, .refs = 1 }
/* A pair's size counts its two members, not the padding (MPI_Type_size);
 * it travels as its whole struct. */
#define PAIR(st, vtype, k) \
    { .size = sizeof(vtype) + sizeof(int), .extent = sizeof(struct st), \
      .wire = sizeof(struct st), .nbasic = 1, .kind = (k), .contig = true, \
      .predefined = true, .committed = true, .refs = 1 }

/* the predefined types of mpi.h */
struct mpiv_mpi_type mpiv_mpi_char_ = BASIC(char, CHAR_MIN < 0 ? K_I8 : K_U8);
struct mpiv_mpi_type mpiv_mpi_signed_char_ = BASIC(signed char, K_I8);
struct mpiv_mpi_type mpiv_mpi_unsigned_char_ = BASIC(unsigned char, K_U8);
struct mpiv_mpi_type mpiv_mpi_byte_ = BASIC(unsigned char, K_BYTE);
struct mpiv_mpi_type mpiv_mpi_short_ = BASIC(short, SKIND(sizeof(short)));
struct mpiv_mpi_type mpiv_mpi_unsigned_short_ = BASIC(unsigned short, UKIND(sizeof(short)));
struct mpiv_mpi_type mpiv_mpi_int_ = BASIC(int, SKIND(sizeof(int)));
struct mpiv_mpi_type mpiv_mpi_unsigned_ = BASIC(unsigned, UKIND(sizeof(int)));
struct mpiv_mpi_type mpiv_mpi_long_ = BASIC(long, SKIND(sizeof(long)));
struct mpiv_mpi_type mpiv_mpi_unsigned_long_ = BASIC(unsigned long, UKIND(sizeof(long)));
struct mpiv_mpi_type mpiv_mpi_long_long_ = BASIC(long long, SKIND(sizeof(long long)));
struct mpiv_mpi_type mpiv_mpi_unsigned_long_long_ = BASIC(unsigned long long, UKIND(sizeof(long long)));
struct mpiv_mpi_type mpiv_mpi_float_ = BASIC(float, K_FLOAT);
struct mpiv_mpi_type mpiv_mpi_double_ = BASIC(double, K_DOUBLE);
struct mpiv_mpi_type mpiv_mpi_long_double_ = BASIC(long double, K_LDOUBLE);
struct mpiv_mpi_type mpiv_mpi_int8_t_ = BASIC(int8_t, K_I8);
struct mpiv_mpi_type mpiv_mpi_int16_t_ = BASIC(int16_t, K_I16);
struct mpiv_mpi_type mpiv_mpi_int32_t_ = BASIC(int32_t, K_I32);
struct mpiv_mpi_type mpiv_mpi_int64_t_ = BASIC(int64_t, K_I64);
struct mpiv_mpi_type mpiv_mpi_uint8_t_ = BASIC(uint8_t, K_U8);
struct mpiv_mpi_type mpiv_mpi_uint16_t_ = BASIC(uint16_t, K_U16);
struct mpiv_mpi_type mpiv_mpi_uint32_t_ = BASIC(uint32_t, K_U32);
struct mpiv_mpi_type mpiv_mpi_uint64_t_ = BASIC(uint64_t, K_U64);
struct mpiv_mpi_type mpiv_mpi_c_bool_ = BASIC(_Bool, K_BOOL);
struct mpiv_mpi_type mpiv_mpi_wchar_ = BASIC(wchar_t, (WCHAR_MIN < 0 ? SKIND(sizeof(wchar_t)) : UKIND(sizeof(wchar_t))));
struct mpiv_mpi_type mpiv_mpi_aint_ = BASIC(MPI_Aint, SKIND(sizeof(MPI_Aint)));
struct mpiv_mpi_type mpiv_mpi_offset_ = BASIC(MPI_Offset, SKIND(sizeof(MPI_Offset)));
struct mpiv_mpi_type mpiv_mpi_count_ = BASIC(MPI_Count, SKIND(sizeof(MPI_Count)));
struct mpiv_mpi_type mpiv_mpi_float_int_ = PAIR(pair_float, float, K_FLOAT_INT);
struct mpiv_mpi_type mpiv_mpi_double_int_ = PAIR(pair_double, double, K_DOUBLE_INT);
struct mpiv_mpi_type mpiv_mpi_long_int_ = PAIR(pair_long, long, K_LONG_INT);
struct mpiv_mpi_type mpiv_mpi_2int_ = PAIR(pair_int, int, K_2INT);
struct mpiv_mpi_type mpiv_mpi_short_int_ = PAIR(pair_short, short, K_SHORT_INT);
struct mpiv_mpi_type mpiv_mpi_long_double_int_ = PAIR(pair_ldouble, long double, K_LDOUBLE_INT);

_Static_assert(sizeof(_Bool) == 1, "C bool is one byte");

mpiv_datatype_t face_native_type(enum face_kind k)
{
    static const mpiv_datatype_t map[K_NKINDS] = {
        [K_I8] = MPIV_INT8,     [K_U8] = MPIV_UINT8,   [K_I16] = MPIV_INT16,
        [K_U16] = MPIV_UINT16,  [K_I32] = MPIV_INT32,  [K_U32] = MPIV_UINT32,
        [K_I64] = MPIV_INT64,   [K_U64] = MPIV_UINT64, [K_FLOAT] = MPIV_FLOAT,
        [K_DOUBLE] = MPIV_DOUBLE, [K_BYTE] = MPIV_BYTE,
    };
    return map[k];
}

/* --- derived types ------------------------------------------------------- */

static int make_blocks(MPI_Datatype old, size_t count, size_t blocklen, ptrdiff_t stride,
                       MPI_Datatype *out, const char *fn)
{
    if (!out)
        return face_fail(NULL, MPI_ERR_ARG, fn, "newtype is NULL");
    if (!old || !(old->predefined || old->refs > 0))
        return face_fail(NULL, MPI_ERR_TYPE, fn, "oldtype is not a datatype");
    if (count > 0 && blocklen > 0 && stride < 0)
        return face_fail(NULL, MPI_ERR_UNSUPPORTED_OPERATION, fn,
                         "a negative stride is not supported by MPIv's MPI face");
    struct mpiv_mpi_type *t = calloc(1, sizeof *t);
    if (!t)
        return face_fail(NULL, MPI_ERR_NO_MEM, fn, "out of memory");
    size_t elems = count * blocklen;
    t->size = elems * old->size;
    t->wire = elems * old->wire;
    t->nbasic = elems * old->nbasic;
    t->kind = old->kind;
    t->extent = count == 0 ? 0 : (size_t)stride * (count - 1) + blocklen * old->extent;
    t->contig = old->contig && (count <= 1 || (size_t)stride == blocklen * old->extent);
    t->base = old;
    t->count = count;
    t->blocklen = blocklen;
    t->stride = stride;
    t->refs = 1;
    if (!old->predefined)
        atomic_fetch_add_explicit(&old->refs, 1, memory_order_relaxed);
    *out = t;
    return MPI_SUCCESS;
}

int MPI_Type_contiguous(int count, MPI_Datatype oldtype, MPI_Datatype *newtype)
{
    if (count < 0)
        return face_fail(NULL, MPI_ERR_COUNT, "MPI_Type_contiguous", "count %d < 0", count);
    size_t ext = oldtype ? oldtype->extent : 0;
    return make_blocks(oldtype, 1, (size_t)count, (ptrdiff_t)(ext * (size_t)count), newtype,
                       "MPI_Type_contiguous");
}

int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype oldtype,
                    MPI_Datatype *newtype)
{
    if (count < 0 || blocklength < 0)
        return face_fail(NULL, MPI_ERR_COUNT, "MPI_Type_vector", "count %d or blocklength %d < 0",
                         count, blocklength);
    ptrdiff_t ext = oldtype ? (ptrdiff_t)oldtype->extent : 0;
    return make_blocks(oldtype, (size_t)count, (size_t)blocklength, (ptrdiff_t)stride * ext,
                       newtype, "MPI_Type_vector");
}

int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype oldtype,
                            MPI_Datatype *newtype)
{
    if (count < 0 || blocklength < 0)
        return face_fail(NULL, MPI_ERR_COUNT, "MPI_Type_create_hvector",
                         "count %d or blocklength %d < 0", count, blocklength);
    return make_blocks(oldtype, (size_t)count, (size_t)blocklength, (ptrdiff_t)stride, newtype,
                       "MPI_Type_create_hvector");
}

int MPI_Type_commit(MPI_Datatype *datatype)
{
    if (!datatype || !*datatype)
        return face_fail(NULL, MPI_ERR_TYPE, "MPI_Type_commit", "no datatype");
    if (!(*datatype)->predefined)
        (*datatype)->committed = true;
    return MPI_SUCCESS;
}

void face_type_release(MPI_Datatype t)
{
    while (t && !t->predefined) {
        if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
            return;
        MPI_Datatype base = t->base;
        free(t);
        t = base;
    }
}

void face_type_hold(MPI_Datatype t)
{
    if (t && !t->predefined)
        atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

int MPI_Type_free(MPI_Datatype *datatype)
{
    if (!datatype || !*datatype)
        return face_fail(NULL, MPI_ERR_TYPE, "MPI_Type_free", "no datatype");
    if ((*datatype)->predefined)
        return face_fail(NULL, MPI_ERR_TYPE, "MPI_Type_free", "a predefined type cannot be freed");
    face_type_release(*datatype);
    *datatype = MPI_DATATYPE_NULL;
    return MPI_SUCCESS;
}

int MPI_Type_size(MPI_Datatype datatype, int *size)
{
    if (!datatype || !size)
        return face_fail(NULL, datatype ? MPI_ERR_ARG : MPI_ERR_TYPE, "MPI_Type_size",
                         "no %s", datatype ? "size" : "datatype");
    if (datatype->size > INT_MAX)
        return face_fail(NULL, MPI_ERR_COUNT, "MPI_Type_size", "the size does not fit an int");
    *size = (int)datatype->size;
    return MPI_SUCCESS;
}

int MPI_Type_get_extent(MPI_Datatype datatype, MPI_Aint *lb, MPI_Aint *extent)
{
    if (!datatype || !lb || !extent)
        return face_fail(NULL, datatype ? MPI_ERR_ARG : MPI_ERR_TYPE, "MPI_Type_get_extent",
                         "a NULL argument");
    *lb = 0;
    *extent = (MPI_Aint)datatype->extent;
    return MPI_SUCCESS;
}

/* --- packing ------------------------------------------------------------- */

/* Copies n elements of t between its layout at `layout` and its packed
 * form at `packed`, in the direction `pack` says. */
static void copy_elements(MPI_Datatype t, char *layout, char *packed, size_t n, bool pack)
{
    if (t->contig) {
        if (pack)
            memcpy(packed, layout, n * t->wire);
        else
            memcpy(layout, packed, n * t->wire);
        return;
    }
    size_t block = t->blocklen * t->base->wire;
    for (size_t i = 0; i < n; i++)
        for (size_t b = 0; b < t->count; b++) {
            copy_elements(t->base, layout + i * t->extent + (size_t)t->stride * b, packed,
                          t->blocklen, pack);
            packed += block;
        }
}

void face_pack(MPI_Datatype t, const void *src, size_t n, void *dst)
{
    copy_elements(t, (char *)src, dst, n, true);
}

void face_unpack(MPI_Datatype t, const void *src, size_t n, void *dst)
{
    copy_elements(t, dst, (char *)src, n, false);
}

/* --- operations ---------------------------------------------------------- */

#define BUILTIN_OP(c, nat) { .code = (c), .native = (nat), .commute = true }
/* the predefined operations of mpi.h, with MPIv's built-in where it has one */
struct mpiv_mpi_op mpiv_mpi_max_ = BUILTIN_OP(OP_MAX, MPIV_MAX);
struct mpiv_mpi_op mpiv_mpi_min_ = BUILTIN_OP(OP_MIN, MPIV_MIN);
struct mpiv_mpi_op mpiv_mpi_sum_ = BUILTIN_OP(OP_SUM, MPIV_SUM);
struct mpiv_mpi_op mpiv_mpi_prod_ = BUILTIN_OP(OP_PROD, MPIV_PROD);
struct mpiv_mpi_op mpiv_mpi_land_ = BUILTIN_OP(OP_LAND, MPIV_LAND);
struct mpiv_mpi_op mpiv_mpi_band_ = BUILTIN_OP(OP_BAND, MPIV_BAND);
struct mpiv_mpi_op mpiv_mpi_lor_ = BUILTIN_OP(OP_LOR, MPIV_LOR);
struct mpiv_mpi_op mpiv_mpi_bor_ = BUILTIN_OP(OP_BOR, MPIV_BOR);
struct mpiv_mpi_op mpiv_mpi_lxor_ = BUILTIN_OP(OP_LXOR, MPIV_OP_NULL);
struct mpiv_mpi_op mpiv_mpi_bxor_ = BUILTIN_OP(OP_BXOR, MPIV_OP_NULL);
struct mpiv_mpi_op mpiv_mpi_minloc_ = BUILTIN_OP(OP_MINLOC, MPIV_OP_NULL);
struct mpiv_mpi_op mpiv_mpi_maxloc_ = BUILTIN_OP(OP_MAXLOC, MPIV_OP_NULL);

static bool kind_int(enum face_kind k) { return k <= K_U64; }
static bool kind_float(enum face_kind k) { return k == K_FLOAT || k == K_DOUBLE || k == K_LDOUBLE; }
static bool kind_pair(enum face_kind k) { return k >= K_FLOAT_INT && k <= K_LDOUBLE_INT; }

bool face_op_valid(MPI_Op op, enum face_kind k)
{
    switch (op->code) {
    case OP_MAX: case OP_MIN: case OP_SUM: case OP_PROD:
        return kind_int(k) || kind_float(k);
    case OP_LAND: case OP_LOR: case OP_LXOR:
        return kind_int(k) || k == K_BOOL;
    case OP_BAND: case OP_BOR: case OP_BXOR:
        return kind_int(k) || k == K_BYTE;
    case OP_MINLOC: case OP_MAXLOC:
        return kind_pair(k);
    case OP_USER:
        return true;
    }
    return false;
}

/* Arithmetic and logical ops on n values of one C type. */
#define ARITH(T)                                                                             \
    do {                                                                                     \
        const T *a = in;                                                                     \
        T *b = inout;                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            switch (code) {                                                                  \
            case OP_MAX: b[i] = a[i] > b[i] ? a[i] : b[i]; break;                            \
            case OP_MIN: b[i] = a[i] < b[i] ? a[i] : b[i]; break;                            \
            case OP_SUM: b[i] = (T)(a[i] + b[i]); break;                                     \
            case OP_PROD: b[i] = (T)(a[i] * b[i]); break;                                    \
            case OP_LAND: b[i] = (T)(a[i] && b[i]); break;                                   \
            case OP_LOR: b[i] = (T)(a[i] || b[i]); break;                                    \
            case OP_LXOR: b[i] = (T)(!a[i] != !b[i]); break;                                 \
            default: break;                                                                  \
            }                                                                                \
    } while (0)
#define BITS(T)                                                                              \
    do {                                                                                     \
        const T *a = in;                                                                     \
        T *b = inout;                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            switch (code) {                                                                  \
            case OP_BAND: b[i] = (T)(a[i] & b[i]); break;                                    \
            case OP_BOR: b[i] = (T)(a[i] | b[i]); break;                                     \
            case OP_BXOR: b[i] = (T)(a[i] ^ b[i]); break;                                    \
            default: break;                                                                  \
            }                                                                                \
    } while (0)
#define LOGICAL(T)                                                                           \
    do {                                                                                     \
        const T *a = in;                                                                     \
        T *b = inout;                                                                        \
        for (size_t i = 0; i < n; i++)                                                       \
            switch (code) {                                                                  \
            case OP_LAND: b[i] = a[i] && b[i]; break;                                        \
            case OP_LOR: b[i] = a[i] || b[i]; break;                                         \
            case OP_LXOR: b[i] = !a[i] != !b[i]; break;                                      \
            default: break;                                                                  \
            }                                                                                \
    } while (0)
/* Integer types: signed overflow in SUM and PROD wraps (as MPIv's own
 * kernels), computed in the unsigned type of the same size. */
#define INTEGER(T, U)                                                                        \
    do {                                                                                     \
        if (code == OP_SUM || code == OP_PROD) {                                             \
            const T *a = in;                                                                 \
            T *b = inout;                                                                    \
            for (size_t i = 0; i < n; i++)                                                   \
                b[i] = (T)(code == OP_SUM ? (U)((U)a[i] + (U)b[i]) : (U)((U)a[i] * (U)b[i])); \
        } else if (code == OP_BAND || code == OP_BOR || code == OP_BXOR) {                   \
            BITS(T);                                                                         \
        } else {                                                                             \
            ARITH(T);                                                                        \
        }                                                                                    \
    } while (0)
/* MINLOC keeps the smaller value, MAXLOC the larger; on equal values the
 * smaller index (so the op is commutative). */
#define PAIRS(S)                                                                             \
    do {                                                                                     \
        const struct S *a = in;                                                              \
        struct S *b = inout;                                                                 \
        for (size_t i = 0; i < n; i++) {                                                     \
            bool take = code == OP_MINLOC ? a[i].v < b[i].v : a[i].v > b[i].v;               \
            if (take || (a[i].v == b[i].v && a[i].i < b[i].i))                               \
                b[i] = a[i];                                                                 \
        }                                                                                    \
    } while (0)

static void kernel(enum face_opcode code, enum face_kind k, const void *in, void *inout, size_t n)
{
    switch (k) {
    case K_I8: INTEGER(int8_t, uint8_t); break;
    case K_U8: INTEGER(uint8_t, uint8_t); break;
    case K_I16: INTEGER(int16_t, uint16_t); break;
    case K_U16: INTEGER(uint16_t, uint16_t); break;
    case K_I32: INTEGER(int32_t, uint32_t); break;
    case K_U32: INTEGER(uint32_t, uint32_t); break;
    case K_I64: INTEGER(int64_t, uint64_t); break;
    case K_U64: INTEGER(uint64_t, uint64_t); break;
    case K_BYTE: BITS(uint8_t); break;
    case K_BOOL: LOGICAL(_Bool); break;
    case K_FLOAT: ARITH(float); break;
    case K_DOUBLE: ARITH(double); break;
    case K_LDOUBLE: ARITH(long double); break;
    case K_FLOAT_INT: PAIRS(pair_float); break;
    case K_DOUBLE_INT: PAIRS(pair_double); break;
    case K_LONG_INT: PAIRS(pair_long); break;
    case K_2INT: PAIRS(pair_int); break;
    case K_SHORT_INT: PAIRS(pair_short); break;
    case K_LDOUBLE_INT: PAIRS(pair_ldouble); break;
    case K_NKINDS: break;
    }
}

void face_op_apply(MPI_Op op, MPI_Datatype t, const void *in, void *inout, size_t n)
{
    if (op->code != OP_USER) {
        kernel(op->code, t->kind, in, inout, n * t->nbasic);
        return;
    }
    /* coll.c hands user functions contiguous types only, whose packed
     * form is their layout; len is an int, so long vectors go in pieces */
    const char *a = in;
    char *b = inout;
    while (n) {
        int len = n > INT_MAX ? INT_MAX : (int)n;
        MPI_Datatype dt = t;
        op->fn((void *)a, b, &len, &dt);
        a += (size_t)len * t->extent;
        b += (size_t)len * t->extent;
        n -= (size_t)len;
    }
}

int MPI_Op_create(MPI_User_function *user_fn, int commute, MPI_Op *op)
{
    if (!user_fn || !op)
        return face_fail(NULL, MPI_ERR_ARG, "MPI_Op_create", "NULL %s", op ? "function" : "op");
    struct mpiv_mpi_op *o = calloc(1, sizeof *o);
    if (!o)
        return face_fail(NULL, MPI_ERR_NO_MEM, "MPI_Op_create", "out of memory");
    o->code = OP_USER;
    o->native = MPIV_OP_NULL;
    o->fn = user_fn;
    o->commute = commute != 0;
    *op = o;
    return MPI_SUCCESS;
}

int MPI_Op_free(MPI_Op *op)
{
    if (!op || !*op || (*op)->code != OP_USER)
        return face_fail(NULL, MPI_ERR_OP, "MPI_Op_free", "not a user operation");
    free(*op);
    *op = MPI_OP_NULL;
    return MPI_SUCCESS;
}

int MPI_Op_commutative(MPI_Op op, int *commute)
{
    if (!op || !commute)
        return face_fail(NULL, op ? MPI_ERR_ARG : MPI_ERR_OP, "MPI_Op_commutative", "NULL argument");
    *commute = op->commute;
    return MPI_SUCCESS;
}
