/*
 * libcuda.so.1 stand-in for simulated NVIDIA nodes (accelsim). Test code: it lets a CUDA driver API
 * probe (cuInit / cuDeviceGetCount, e.g. through ctypes) see what the simulated node shows.
 *
 *   cuInit(0)            CUDA_SUCCESS; CUDA_ERROR_SYSTEM_NOT_READY (802) while Fabric Manager is down
 *                        (fault fabricmanager_stopped, or the simulated nv-fabricmanager not running);
 *                        CUDA_ERROR_NO_DEVICE (100) when no GPU is present.
 *   cuDeviceGetCount     present GPUs, read from $ACCELSIM_ROOT/etc/accelsim/device_count
 *   cuDriverGetVersion   13000
 *   cuDeviceGet, cuGetErrorName, cuGetErrorString
 *
 * State files are kept up to date by `accelsim fault ...` (see tests/sim/accelsim/cli.py).
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef int CUresult;
typedef int CUdevice;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_SYSTEM_NOT_READY = 802,
};

static int initialized;

static void state_path(char *out, size_t size, const char *name) {
    const char *root = getenv("ACCELSIM_ROOT");
    if (root == NULL || root[0] == '\0') {
        root = "/";
    }
    snprintf(out, size, "%s/etc/accelsim/%s", root, name);
}

static int file_exists(const char *name) {
    char path[PATH_MAX];
    state_path(path, sizeof path, name);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    fclose(f);
    return 1;
}

static int read_first_line(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    int ok = fgets(buf, (int)size, f) != NULL;
    fclose(f);
    if (ok) {
        buf[strcspn(buf, "\r\n")] = '\0';
    }
    return ok;
}

/* The simulated Fabric Manager is installed (marker names its pid file) but its process is gone. */
static int fabric_manager_down(void) {
    char marker[PATH_MAX], pidfile[PATH_MAX], path[PATH_MAX], line[64];
    state_path(marker, sizeof marker, "fabricmanager");
    if (!read_first_line(marker, pidfile, sizeof pidfile)) {
        return 0; /* no Fabric Manager on this profile */
    }
    const char *root = getenv("ACCELSIM_ROOT");
    snprintf(path, sizeof path, "%s%s", (root && root[0]) ? root : "", pidfile);
    if (!read_first_line(path, line, sizeof line)) {
        return 1;
    }
    long pid = strtol(line, NULL, 10);
    if (pid <= 0) {
        return 1;
    }
    if (kill((pid_t)pid, 0) == 0 || errno == EPERM) {
        return 0;
    }
    return 1;
}

static int device_count(void) {
    char path[PATH_MAX], line[64];
    state_path(path, sizeof path, "device_count");
    if (!read_first_line(path, line, sizeof line)) {
        return 0;
    }
    int n = atoi(line);
    return n < 0 ? 0 : n;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (file_exists("cuda_not_ready") || fabric_manager_down()) {
        return CUDA_ERROR_SYSTEM_NOT_READY;
    }
    if (device_count() == 0) {
        return CUDA_ERROR_NO_DEVICE;
    }
    initialized = 1;
    return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *version) {
    if (version == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    *version = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (count == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    *count = device_count();
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (device == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!initialized) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if (ordinal < 0 || ordinal >= device_count()) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *device = ordinal;
    return CUDA_SUCCESS;
}

struct error_text {
    CUresult code;
    const char *name;
    const char *text;
};

static const struct error_text ERRORS[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
};

static const struct error_text *lookup(CUresult code) {
    for (size_t i = 0; i < sizeof ERRORS / sizeof ERRORS[0]; i++) {
        if (ERRORS[i].code == code) {
            return &ERRORS[i];
        }
    }
    return NULL;
}

CUresult cuGetErrorName(CUresult error, const char **name) {
    const struct error_text *e = lookup(error);
    if (name == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (e == NULL) {
        *name = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *name = e->name;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
    const struct error_text *e = lookup(error);
    if (text == NULL) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (e == NULL) {
        *text = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    *text = e->text;
    return CUDA_SUCCESS;
}
