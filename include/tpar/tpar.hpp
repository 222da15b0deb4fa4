// tpar — cross-device AllReduce for Vulkan. The umbrella header: everything public.
#pragma once

#include <tpar/core/buffer_span.hpp>
#include <tpar/core/config.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/log.hpp>
#include <tpar/core/options.hpp>
#include <tpar/core/timeline_point.hpp>
#include <tpar/core/wire.hpp>
#include <tpar/vk/capabilities.hpp>
#include <tpar/vk/device.hpp>
#include <tpar/vk/device_group.hpp>
#include <tpar/vk/kernels.hpp>
#include <tpar/staging/capacity.hpp>
#include <tpar/staging/host_import.hpp>
#include <tpar/sync/concepts.hpp>
#include <tpar/sync/proxy_bridge.hpp>
#include <tpar/sync/schedule.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/algo/by_size.hpp>
#include <tpar/algo/chunked_ring.hpp>
#include <tpar/algo/one_shot.hpp>
#include <tpar/algo/request.hpp>
#include <tpar/comm/any_communicator.hpp>
#include <tpar/comm/communicator.hpp>
#include <tpar/comm/ticket.hpp>
