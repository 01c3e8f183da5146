// kvm_uapi.h: <linux/kvm.h> made right for C++; include this, never
// <linux/kvm.h> directly. Debian 12's linux-libc-dev (6.1) declares the
// variable-length KVM structs (kvm_cpuid2, kvm_msrs, kvm_msr_list, ...) with
// __DECLARE_FLEX_ARRAY, whose empty inner struct has size 1 in C++ (0 in C).
// In C++ the arrays therefore move (kvm_cpuid2.entries to offset 12,
// kvm_msrs.entries to 16) and the ioctl numbers that encode the struct sizes
// (KVM_GET_SUPPORTED_CPUID, KVM_SET_CPUID2, KVM_GET/SET_MSRS,
// KVM_GET_MSR_FEATURE_INDEX_LIST, ...) stop matching the kernel's: each such
// ioctl fails with EINVAL. Declaring the arrays as GNU zero-length arrays
// restores the C layout; the static_asserts catch a <linux/kvm.h> that some
// other header pulled in first.
#ifndef VBTS_VCPU_KVM_UAPI_H_
#define VBTS_VCPU_KVM_UAPI_H_

#include <linux/stddef.h>

#include <cstddef>
#undef __DECLARE_FLEX_ARRAY
#define __DECLARE_FLEX_ARRAY(TYPE, NAME) TYPE NAME[0]
#include <linux/kvm.h>

static_assert(sizeof(kvm_cpuid2) == 8 && offsetof(kvm_cpuid2, entries) == 8,
              "<linux/kvm.h> was included before vcpu/kvm_uapi.h: C++ flexible-array layout");
static_assert(sizeof(kvm_msrs) == 8 && offsetof(kvm_msrs, entries) == 8, "kvm_msrs layout");
static_assert(sizeof(kvm_msr_list) == 4 && offsetof(kvm_msr_list, indices) == 4, "kvm_msr_list layout");
static_assert(KVM_GET_SUPPORTED_CPUID == 0xC008AE05, "KVM_GET_SUPPORTED_CPUID ioctl number");

#endif  // VBTS_VCPU_KVM_UAPI_H_
