#!/bin/sh
# iommu.sh: Linux's own VT-d driver on vbts's remapping unit and edu device
# (`vbts run --device=intel-iommu,edu`; vmm/intel_iommu.h, vmm/pci_edu.h),
# through what the kernel exposes: the interrupts it routes through interrupt
# remapping, the unit's registers as sysfs shows them, the edu device on the
# PCI bus and in an IOMMU group, and two DMA transfers of the device to an
# address its DMA domain does not map, each a fault the unit records and
# signals (the kernel logs them; run-linux.py checks those lines). Run by
# init.c (`-- run /bin/sh /iommu.sh`), whose verdict is this script's status.
export PATH=/usr/bin:/bin
. /check.sh

# /proc/interrupts line of IRQ $1: "count chip ..." -> $count $chip
irq() {
  set -- $(grep "^ *$1:" /proc/interrupts)
  count=$2
  chip=$3
}

irq 0
check "timer through interrupt remapping" "$([ "$chip" = IR-IO-APIC ] && [ "$count" -gt 0 ] && echo 1)" \
  "IRQ 0 on $chip, $count interrupts (expected IR-IO-APIC, > 0)"
irq 4
check "COM1 through interrupt remapping" "$([ "$chip" = IR-IO-APIC ] && [ "$count" -gt 0 ] && echo 1)" \
  "IRQ 4 on $chip, $count interrupts (expected IR-IO-APIC, > 0)"

u=/sys/class/iommu/dmar0/intel-iommu
regs="$(cat $u/version $u/address $u/cap $u/ecap 2>&1 | tr '\n' ' ')"
check "dmar0 registers" "$([ "$regs" = "1:0 fed90000 c222f0606 f00f5b " ] && echo 1)" \
  "version, address, cap, ecap: $regs(expected 1:0 fed90000 c222f0606 f00f5b)"

d=/sys/bus/pci/devices/0000:00:03.0
ids="$(cat $d/vendor $d/device $d/class 2>&1 | tr '\n' ' ')"
check "edu on the PCI bus" "$([ "$ids" = "0x1234 0x11e8 0x00ff00 " ] && echo 1)" \
  "00:03.0 vendor, device, class: $ids(expected 0x1234 0x11e8 0x00ff00)"
check "edu in an IOMMU group" "$([ -e $d/iommu_group ] && [ -e /sys/class/iommu/dmar0/devices/0000:00:03.0 ] && echo 1)" \
  "$d/iommu_group and dmar0's devices/0000:00:03.0"

irq 24
before=$count
/init edu-dma 0x1000
irq 24
check "DMA faults signalled" "$([ "$chip" = DMAR-MSI ] && [ "$before" = 0 ] && [ "$count" = 2 ] && echo 1)" \
  "IRQ 24 on $chip: $before fault interrupts before the transfers, $count after (expected DMAR-MSI, 0, 2)"

summary
