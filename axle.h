// The user API of axle, in one include.
#pragma once

#include "actors/api.h"
#include "actors/replicas.h"
#include "engine/metrics.h"
#include "graph/ops.h"
#include "graph/tensor.h"
