// The user API of axle, in one include.
#pragma once

#include "actors/api.h"
#include "actors/data_parallel.h"
#include "actors/replicas.h"
#include "actors/step_breakdown.h"
#include "engine/metrics.h"
#include "graph/autocast.h"
#include "graph/autograd.h"
#include "graph/collectives.h"
#include "graph/nn/functional.h"
#include "graph/nn/layers.h"
#include "graph/nn/loss.h"
#include "graph/nn/module.h"
#include "graph/ops.h"
#include "graph/optim/lr_scheduler.h"
#include "graph/optim/optimizer.h"
#include "graph/tensor.h"
