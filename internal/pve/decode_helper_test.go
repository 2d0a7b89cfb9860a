package pve

import "fmt"

// decodeResourcesBody is what Resources does with a successful answer's body.
func decodeResourcesBody(body []byte) ([]Resource, error) {
	var a resourcesAnswer
	_, envErr, dataErr := decodeAnswer(body, &a)
	if envErr != nil {
		return nil, envErr
	}
	if dataErr != nil {
		return nil, fmt.Errorf("data: %w", dataErr)
	}
	return a.res, nil
}
