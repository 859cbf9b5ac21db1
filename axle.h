// The user API of axle, in one include.
#pragma once

#include "actors/api.h"
#include "engine/metrics.h"
#include "graph/autograd.h"
#include "graph/ops.h"
#include "graph/tensor.h"
