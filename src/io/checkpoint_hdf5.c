/* checkpoint_hdf5.c: what the checkpoint files share of HDF5: the reason for a
 * failure (and the first-error message), scalar attributes, and the MPI-IO file
 * access of writes and reads. */
#include "io/checkpoint_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- error text -------------------------------------------------------------- */

/* The innermost description on HDF5's error stack: the most specific reason. */
static herr_t walk_last(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0 && e->desc)
        snprintf((char *)data, 256, "%s", e->desc);
    return 0;
}

const char *ckpt_h5_why(char *buf)
{
    buf[0] = '\0';
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_last, buf);
    H5Eclear2(H5E_DEFAULT);
    if (!buf[0])
        snprintf(buf, 256, "unknown HDF5 error");
    return buf;
}

void ckpt_fail(char *err, size_t len, const char *fmt, ...)
{
    if (err[0])
        return; /* keep the first, most direct reason */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

/* ---- attributes ----------------------------------------------------------- */

int ckpt_attr_write(hid_t obj, const char *name, hid_t type, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, type, v);
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(sp);
    return rc < 0 ? -1 : 0;
}

int ckpt_attr_str(hid_t obj, const char *name, const char *v)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = ckpt_attr_write(obj, name, t, v);
    H5Tclose(t);
    return rc;
}

int ckpt_attr_i64(hid_t obj, const char *name, int64_t v)
{
    return ckpt_attr_write(obj, name, H5T_NATIVE_INT64, &v);
}

/* The open attribute a holds one value (a scalar or a one-element array) of class cls */
static int attr_is_single(hid_t a, H5T_class_t cls)
{
    hid_t space = H5Aget_space(a);
    hssize_t n = space < 0 ? -1 : H5Sget_simple_extent_npoints(space);
    if (space >= 0)
        H5Sclose(space);
    hid_t ft = H5Aget_type(a);
    H5T_class_t c = ft < 0 ? H5T_NO_CLASS : H5Tget_class(ft);
    if (ft >= 0)
        H5Tclose(ft);
    return n == 1 && c == cls;
}

int ckpt_attr_read(hid_t obj, const char *name, hid_t type, void *v)
{
    if (H5Aexists(obj, name) <= 0)
        return CKPT_ATTR_MISSING;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return CKPT_ATTR_WRONG_KIND;
    int rc = attr_is_single(a, H5Tget_class(type)) && H5Aread(a, type, v) >= 0
                 ? 0
                 : CKPT_ATTR_WRONG_KIND;
    H5Aclose(a);
    return rc;
}

int ckpt_attr_read_str(hid_t obj, const char *name, char *buf, size_t len)
{
    if (H5Aexists(obj, name) <= 0)
        return CKPT_ATTR_MISSING;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0)
        return CKPT_ATTR_WRONG_KIND;
    int rc = CKPT_ATTR_WRONG_KIND;
    if (attr_is_single(a, H5T_STRING)) {
        hid_t ft = H5Aget_type(a);
        size_t sz = H5Tget_size(ft);
        if (!H5Tis_variable_str(ft) && sz < len) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, sz + 1);
            memset(buf, 0, len);
            rc = H5Aread(a, mt, buf) < 0 ? CKPT_ATTR_WRONG_KIND : 0;
            H5Tclose(mt);
        }
        H5Tclose(ft);
    }
    H5Aclose(a);
    return rc;
}

/* ---- file access ------------------------------------------------------------ */

/* Reading: each rank opens only its own tensors, so metadata operations are not
 * collective (collective ones need every rank to make the same calls). */
hid_t ckpt_mpio_fapl(tr_group *g)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, tr_group_mpi_comm(g), MPI_INFO_NULL);
    return fapl;
}
