// tpar — cross-device AllReduce for Vulkan. The umbrella header: everything public.
#pragma once

// The communicators (AnyCommunicator, make_communicator, Communicator<Sync, Algo, Staging>)
// and all they stand on: options, errors, logging, devices and groups, staging, the sync
// policies, the algorithms and their schedules, tickets, profiles, the relay's self-test.
#include <tpar/comm/any_communicator.hpp>
// AllReduces in the host's own ordered streams: Stream, StreamAllreduce.
#include <tpar/comm/stream.hpp>
// Splitting a model's layers and weights over the devices: split plans, segments,
// granularity, layer rotation.
#include <tpar/plan/layer_split.hpp>
#include <tpar/plan/split_plan.hpp>
