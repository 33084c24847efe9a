#ifndef STRATA_CZSTD_SHIM_H
#define STRATA_CZSTD_SHIM_H
#include <zstd.h>
#endif
