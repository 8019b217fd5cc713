package cuda

import "slices"

// PCIOrder lists the PCI addresses of the GPUs CUDA sees, sorted.
func PCIOrder(drv *Driver) ([]string, error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return nil, err
	}
	var addrs []string
	for i := range n {
		dev, err := drv.Device(i)
		if err != nil {
			return nil, err
		}
		a, err := dev.PCIBusID()
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs, nil
}
